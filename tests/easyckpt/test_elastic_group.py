"""easyckpt.ElasticGroup with real training processes on torch's gloo: the test plays the platform
(it writes the membership files the agent writes, starts a growth's new worker and stops a
shrink's), and the workers that stay never restart. The ranks' agreement on when and to which
generation they switch (easyckpt.elastic.Switch) is also driven step by step over an in-process
store, in orders the processes would hit only by chance."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from easyckpt.elastic import Membership, Switch, arrived_key

dist = pytest.importorskip("torch.distributed")

# A data-parallel worker: gradients averaged over the group each step, state synced from rank 0
# whenever the group re-forms; one JSON line a step with what it saw, and one as it recovers.
WORKER = textwrap.dedent("""
    import json, os, sys, time
    time.sleep(float(os.environ.get("START_DELAY", "0")))  # a new worker's own start-up
    import torch, torch.distributed as dist
    import easyckpt

    def own_link_fails():
        world = dist.group.WORLD  # a failed collective's frames hold its group, as gloo's do
        raise RuntimeError("this worker's connection to a peer failed")

    def link_fails_in_first_broadcast():
        broadcast = dist.broadcast
        def failing_once(*args, **kwargs):
            dist.broadcast = broadcast
            own_link_fails()
        dist.broadcast = failing_once

    log = open(sys.argv[1], "a", buffering=1)
    group = easyckpt.ElasticGroup(timeout_s=float(os.environ.get("GROUP_TIMEOUT", "60")))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if os.environ.get("FAIL_AT") == "start":
        link_fails_in_first_broadcast()
    step = group.resync(model, optimizer, value=0)
    while step < int(os.environ.get("STEPS", "100000")):
        if group.poll():
            step = group.resync(model, optimizer, value=step)
        try:
            torch.manual_seed(step * 1000 + group.rank)  # each rank its own batch
            loss = model(torch.rand(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            if os.environ.get("FAIL_AT") == f"{group.generation}/{step}":
                own_link_fails()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= group.world_size
            optimizer.step()
        except RuntimeError as error:
            log.write(json.dumps({"recovering": group.generation}) + "\\n")
            group.recover(error)
            step = group.resync(model, optimizer, value=step)
            continue
        step += 1
        checksum = round(sum(float(p.detach().sum()) for p in model.parameters()), 6)
        log.write(json.dumps({"pid": os.getpid(), "generation": group.generation, "rank": group.rank,
                              "world": group.world_size, "step": step, "checksum": checksum,
                              "time": time.time()}) + "\\n")
        time.sleep(0.02)
    group.close()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """The platform's part for one job: its port, its workers and their membership files."""

    def __init__(self, tmp_path):
        self.dir, self.port = tmp_path, free_port()
        self.script = tmp_path / "worker.py"
        self.script.write_text(WORKER)
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name, *, rank, world, generation=0, membership=True, **env):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(self.port), "OPENDLC_ELASTIC_GENERATION": str(generation),
               "PYTHONWARNINGS": "ignore", **{k: str(v) for k, v in env.items()}}
        if membership:
            env["OPENDLC_MEMBERSHIP_FILE"] = str(self.dir / f"{name}.json")
        else:
            env.pop("OPENDLC_MEMBERSHIP_FILE", None)
        self.procs[name] = subprocess.Popen([sys.executable, str(self.script), str(self.dir / f"{name}.log")],
                                            env=env, stderr=subprocess.PIPE, text=True)

    def tell(self, name, *, generation, rank, world):
        """What the agent does for a kept worker: replace its membership file whole."""
        partial = self.dir / f".{name}.json"
        partial.write_text(json.dumps({"generation": generation, "rank": rank, "world_size": world,
                                       "master_addr": "127.0.0.1", "master_port": self.port}))
        os.replace(partial, self.dir / f"{name}.json")

    def lines(self, name) -> list[dict]:
        path = self.dir / f"{name}.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def steps(self, name) -> list[dict]:
        return [line for line in self.lines(name) if "step" in line]

    def recovering(self, name) -> bool:
        return any("recovering" in line for line in self.lines(name))

    def wait(self, condition, what, timeout=60):
        deadline = time.monotonic() + timeout
        while not condition():
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() not in (None, 0, -signal.SIGTERM)}
            assert not dead, f"a worker failed waiting for {what}: {dead} {self.errors()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def errors(self) -> str:
        return " ".join(p.stderr.read()[-1500:] for p in self.procs.values() if p.poll() is not None and p.stderr)

    def stop(self):
        for p in self.procs.values():
            p.kill()
            p.wait()


@pytest.fixture
def job(tmp_path):
    j = Job(tmp_path)
    yield j
    j.stop()


def in_generation(job, name, generation, n=3):
    return lambda: sum(1 for s in job.steps(name) if s["generation"] == generation) >= n


def agree(job, names, generation):
    """The workers' parameters at each step of the generation they all logged: the same on every rank."""
    by_step = {}
    for name in names:
        for s in job.steps(name):
            if s["generation"] == generation:
                by_step.setdefault(s["step"], {})[name] = s["checksum"]
    shared = {step: sums for step, sums in by_step.items() if len(sums) == len(names)}
    return shared and all(len(set(sums.values())) == 1 for sums in shared.values())


GROUP_TIMEOUT_S = 30


def test_kept_workers_keep_training_while_a_new_one_starts_then_grow_and_shrink_in_place(job):
    job.start("w0", rank=0, world=2, GROUP_TIMEOUT=GROUP_TIMEOUT_S)
    job.start("w1", rank=1, world=2, GROUP_TIMEOUT=GROUP_TIMEOUT_S)
    job.wait(lambda: in_generation(job, "w0", 0)() and in_generation(job, "w1", 0)(), "the first group")
    pids = {n: job.procs[n].pid for n in ("w0", "w1")}

    # Growth 2 -> 3: the new worker takes 2 s to start; the kept ones are told at once.
    told = time.time()
    job.start("w2", rank=2, world=3, generation=1, START_DELAY=2, GROUP_TIMEOUT=GROUP_TIMEOUT_S)
    job.tell("w0", generation=1, rank=0, world=3)
    job.tell("w1", generation=1, rank=1, world=3)
    job.wait(lambda: all(in_generation(job, n, 1)() for n in ("w0", "w1", "w2")), "the grown group")
    for name in ("w0", "w1"):
        steps = job.steps(name)
        assert max(s["time"] for s in steps if s["generation"] == 0) > told + 1.5  # no stall for the start-up
        assert {s["pid"] for s in steps} == {pids[name]}  # never restarted
        assert {s["world"] for s in steps if s["generation"] == 1} == {3}
    assert agree(job, ("w0", "w1", "w2"), 1)
    first_w2 = min(s["step"] for s in job.steps("w2"))
    assert first_w2 > 3  # it went on from the kept workers' step, not from 0

    # Shrink 3 -> 2, taking the middle rank (the new worker becomes rank 1). The platform tells
    # the kept ones only once their collective has failed, so recover() waits for the generation.
    pids["w2"] = job.procs["w2"].pid
    job.procs["w1"].send_signal(signal.SIGTERM)
    shrunk = time.monotonic()
    job.wait(lambda: job.recovering("w0") and job.recovering("w2"), "the broken collective")
    job.tell("w0", generation=2, rank=0, world=2)
    job.tell("w2", generation=2, rank=1, world=2)
    job.wait(lambda: in_generation(job, "w0", 2)() and in_generation(job, "w2", 2)(), "the shrunk group")
    assert time.monotonic() - shrunk < GROUP_TIMEOUT_S  # nobody waited out a timeout
    for name in ("w0", "w2"):
        steps = job.steps(name)
        assert {s["pid"] for s in steps} == {pids[name]}
        assert {s["world"] for s in steps if s["generation"] == 2} == {2}
    assert agree(job, ("w0", "w2"), 2)


def test_a_worker_waiting_in_a_collective_is_let_go_when_a_peer_recovers(job):
    # Rank 0's step fails (its link to a stopped worker broke) while rank 1 goes into the
    # collective, where it waits for a peer that is alive: at a shrink, the ranks whose collective
    # does not talk to the stopped worker are in that place.
    job.start("w0", rank=0, world=2, GROUP_TIMEOUT=GROUP_TIMEOUT_S, FAIL_AT="0/5")
    job.start("w1", rank=1, world=2, GROUP_TIMEOUT=GROUP_TIMEOUT_S)
    job.wait(lambda: job.recovering("w0") and job.recovering("w1"), "both to recover",
             timeout=GROUP_TIMEOUT_S / 2)  # rank 1 did not wait out the group's timeout
    job.tell("w0", generation=1, rank=0, world=2)
    job.tell("w1", generation=1, rank=1, world=2)
    job.wait(lambda: in_generation(job, "w0", 1)() and in_generation(job, "w1", 1)(), "the new group")
    assert agree(job, ("w0", "w1"), 1)


def test_a_peer_lost_while_the_workers_first_sync_their_state_is_recovered_from(job):
    # A worker's start-up is long and the platform resizes whenever capacity moves: a shrink may
    # stop a peer while the kept workers still copy rank 0's state, before their first step.
    job.start("w0", rank=0, world=2, GROUP_TIMEOUT=GROUP_TIMEOUT_S, FAIL_AT="start")
    job.start("w1", rank=1, world=2, GROUP_TIMEOUT=GROUP_TIMEOUT_S)
    pid = job.procs["w0"].pid
    job.tell("w0", generation=1, rank=0, world=2)
    job.tell("w1", generation=1, rank=1, world=2)
    job.wait(lambda: in_generation(job, "w0", 1)() and in_generation(job, "w1", 1)(), "the new group")
    assert {s["generation"] for s in job.steps("w0")} == {1}  # no step before the group re-formed
    assert {s["pid"] for s in job.steps("w0")} == {pid}
    assert agree(job, ("w0", "w1"), 1)


def test_a_peer_lost_with_no_new_generation_fails_the_worker_after_its_timeout(job):
    job.start("w0", rank=0, world=2, GROUP_TIMEOUT=3)
    job.start("w1", rank=1, world=2, GROUP_TIMEOUT=3)
    job.wait(lambda: in_generation(job, "w0", 0)(), "the group")
    job.procs["w1"].kill()
    began = time.monotonic()
    code = job.procs["w0"].wait(timeout=60)
    assert code != 0 and time.monotonic() - began >= 2.5  # it waited for a resize before failing
    assert "Error" in job.procs["w0"].stderr.read().splitlines()[-1]  # the collective's own error


def test_without_a_membership_file_the_group_is_fixed(job):
    job.start("solo", rank=0, world=1, membership=False, STEPS=5)
    assert job.procs["solo"].wait(timeout=60) == 0, job.procs["solo"].stderr.read()
    steps = job.steps("solo")
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5] and {s["generation"] for s in steps} == {0}


def test_a_membership_needs_the_master_and_a_rank_within_the_world(tmp_path):
    with pytest.raises(ValueError, match="MASTER_ADDR and MASTER_PORT"):
        Membership.from_env({"RANK": "0", "WORLD_SIZE": "1"})
    with pytest.raises(ValueError, match="got rank 2, world_size 2"):
        Membership.from_env({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert Membership.read(tmp_path / "none.json") is None


def member(generation, rank, world) -> Membership:
    return Membership(generation, rank, world, "127.0.0.1", 29500)


def ranks(store, world, generation=0) -> list[Switch]:
    """The switches of one group's ranks over one store; each call of at_step() is that rank's
    top of a step, called in the order the test gives."""
    return [Switch(store, member(generation, r, world)) for r in range(world)]


def test_the_kept_ranks_switch_together_once_the_new_worker_has_arrived():
    store = dist.HashStore()
    r0, r1 = ranks(store, 2)
    r0.tell(member(1, 0, 3))
    r1.tell(member(1, 1, 3))
    for _ in range(3):  # the new worker is still starting: the kept ones step on in generation 0
        assert (r0.at_step(), r1.at_step()) == (None, None)
    store.add(arrived_key(1), 1)  # it is constructed and waits in generation 1's rendezvous
    assert (r0.at_step(), r1.at_step()) == (None, None)  # rank 0 decided: after this step
    assert (r0.at_step(), r1.at_step()) == (member(1, 0, 3), member(1, 1, 3))


def test_every_rank_switches_to_the_generation_rank_0_named_though_a_newer_one_came_meanwhile():
    store = dist.HashStore()
    r0, r1 = ranks(store, 2)
    r0.tell(member(1, 0, 3))
    r1.tell(member(1, 1, 3))
    store.add(arrived_key(1), 1)
    assert r1.at_step() is None  # rank 1 is at the top of the step before rank 0 decides
    assert r0.at_step() is None  # rank 0 decides: generation 1 after this step
    # The platform shrinks the job back before the switch, and rank 1's agent writes first.
    r1.tell(member(2, 1, 2))
    assert r1.at_step() == member(1, 1, 3)
    r0.tell(member(2, 0, 2))
    assert r0.at_step() == member(1, 0, 3)

    # Generation 2 comes next, decided in generation 1's group; the worker it takes is not told.
    r0.formed(member(1, 0, 3))
    r1.formed(member(1, 1, 3))
    r2 = Switch(store, member(1, 2, 3))
    assert (r0.at_step(), r1.at_step(), r2.at_step()) == (None, None, None)
    assert (r0.at_step(), r1.at_step()) == (member(2, 0, 2), member(2, 1, 2))


def test_after_a_failure_every_rank_forms_the_generation_rank_0_chose():
    store = dist.HashStore()
    r0, r1, _ = ranks(store, 3)
    r0.tell(member(1, 0, 2))  # a shrink to 2, and rank 0 knows it first
    assert r0.after_failure() is None  # rank 1 has not arrived in generation 1
    # Rank 1 reads the shrink, then at once a growth back to 3 whose new worker is still starting.
    r1.tell(member(1, 1, 2))
    r1.tell(member(2, 1, 3))
    assert r1.after_failure() is None  # only rank 0 chooses
    assert r0.after_failure() == member(1, 0, 2)
    assert r1.after_failure() == member(1, 1, 2)
