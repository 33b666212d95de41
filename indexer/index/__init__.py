"""The SQLite file: opening it, its schema and migrations, its views,
generations, prices, search and the counts that say how it stands."""
