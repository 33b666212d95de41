"""What is wrong with a session: the operator signals and their listings."""
