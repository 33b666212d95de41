"""The NATS client's share of the fleet central's cost (issue 28, item 6).

    python bench/pull_cost.py [--rate 520] [--size 2600] [--seconds 20] [--rounds 2]

Starts ``nats-server -js`` on a loopback port and, in a child process, publishes
--rate messages a second of --size bytes (Poisson arrivals, live traffic: one line a
message) on the fleet's stream for --seconds; this process consumes them as the central
does, without an index: a batch fetched (what comes within fleet_central.GATHER_S joins
it), each message acknowledged, the acknowledgements flushed. Two ways, alternated
--rounds times, each on its own consumer and a fresh stream: ``fetch`` (nats-py's pull
subscription's ``fetch``, then a second ``fetch`` for what came while the batch gathered:
the central before fleet_nats.Pull) and ``pull`` (fleet_nats.Pull: one pull request
open, one inbox subscription). Prints, for each, this process's CPU seconds (user +
system) a message and the messages taken; compare the two within one invocation.
"""
import argparse, asyncio, multiprocessing, os, random, shutil, socket, subprocess, sys
import tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer.ingest import fleet_central, fleet_nats, fleet_wire   # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def publisher(url: str, rate: float, size: int, seconds: float, seed: int) -> None:
    """The child process: Poisson arrivals at ``rate`` a second for ``seconds``."""
    import nats

    async def main():
        nc = await nats.connect(url)
        js = nc.jetstream()
        rng, body = random.Random(seed), b"x" * size
        start = time.monotonic()
        due = start
        while due - start < seconds:
            due += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await js.publish("session-index.h.lines", body)
        await nc.close()

    asyncio.run(main())


async def old_fetch(sub, wait: float, gather: float) -> list:
    """What fleet_central._fetch did with nats-py's fetch (before fleet_nats.Pull)."""
    from nats.errors import TimeoutError as FetchTimeout

    try:
        msgs = await sub.fetch(fleet_central.FETCH_BATCH, timeout=wait)
    except (FetchTimeout, asyncio.TimeoutError):
        return []
    if len(msgs) < fleet_central.FETCH_BATCH:
        await asyncio.sleep(gather)
    while len(msgs) < fleet_central.FETCH_BATCH:
        asked = fleet_central.FETCH_BATCH - len(msgs)
        try:
            more = await sub.fetch(asked, timeout=0.01)
        except (FetchTimeout, asyncio.TimeoutError):
            break
        msgs += more
        if len(more) < asked:
            break
    return msgs


async def consume(url: str, how: str, name: str, args) -> tuple[float, int]:
    """(CPU seconds, messages) of taking what the publisher sends, ``how``."""
    import nats
    from nats.js.api import ConsumerConfig

    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        await js.delete_stream(fleet_wire.STREAM)
    except Exception:
        pass
    await fleet_nats.ensure_stream(js)
    config = ConsumerConfig(durable_name=name, filter_subject=fleet_wire.STREAM_SUBJECTS[0],
                            ack_wait=fleet_central.ACK_WAIT_S,
                            max_ack_pending=fleet_central.MAX_ACK_PENDING)
    if how == "fetch":
        sub = await js.pull_subscribe(fleet_wire.STREAM_SUBJECTS[0], durable=name,
                                      stream=fleet_wire.STREAM, config=config)

        def take():
            return old_fetch(sub, fleet_central.IDLE_S, fleet_central.GATHER_S)
    else:
        await js.add_consumer(fleet_wire.STREAM, config)
        pull = await fleet_nats.Pull(nc, fleet_wire.STREAM, name,
                                     fleet_central.FETCH_BATCH).start()

        def take():
            return pull.fetch(fleet_central.IDLE_S, fleet_central.GATHER_S)

    child = multiprocessing.Process(target=publisher, args=(
        url, args.rate, args.size, args.seconds, args.seed))
    cpu, taken = time.process_time(), 0
    child.start()
    quiet_since = None
    while True:
        msgs = await take()
        for m in msgs:
            await m.ack()
        if msgs:
            await nc.flush()
            taken += len(msgs)
            quiet_since = None
        elif not child.is_alive():
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 1.0:
                break
    cpu = time.process_time() - cpu
    child.join()
    await nc.close()
    return cpu, taken


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=520.0, help="messages a second")
    ap.add_argument("--size", type=int, default=2600, help="bytes a message")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    server = shutil.which("nats-server") or "/usr/sbin/nats-server"
    work = tempfile.mkdtemp(prefix="pull-cost-")
    port = free_port()
    proc = subprocess.Popen([server, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    try:
        time.sleep(0.5)
        results = {"fetch": [], "pull": []}
        for r in range(args.rounds):
            for how in ("fetch", "pull") if r % 2 == 0 else ("pull", "fetch"):
                cpu, taken = asyncio.run(consume(url, how, f"{how}-{r}", args))
                results[how].append(cpu / max(taken, 1))
                print(f"round {r + 1} {how:5}  {taken} messages, {cpu:.2f} s CPU: "
                      f"{cpu / max(taken, 1) * 1e6:.1f} us a message; load "
                      f"{os.getloadavg()[0]:.1f}", flush=True)
        f, p = (sum(v) / len(v) for v in (results["fetch"], results["pull"]))
        print(f"mean: fetch {f * 1e6:.1f} us, pull {p * 1e6:.1f} us a message "
              f"(pull/fetch {p / f:.2f})")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
