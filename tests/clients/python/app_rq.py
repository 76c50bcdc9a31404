"""RQ (Redis Queue, on redis-py) as an ordinary application uses it, each step asserted.

Jobs are enqueued, run by a real in-process worker (SimpleWorker, burst mode:
it works until its queues are empty and returns; no fork), retried, scheduled,
chained and cleaned up. RQ 2 keeps each job's results in a stream,
rq:results:<job id>, written with XADD ... MAXLEN ~ 10 and read with
XREVRANGE (latest_result, results) and XREAD BLOCK (latest_result(timeout=)).
The job functions are in rq_jobs.py.

Env: TARGET (elsa|redis), HOST, PORT, PASSWORD. Prints one
`PASS|FAIL|SKIP feature` line per feature and a SUMMARY line.
"""
import os
import re
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import redis
from rq import Queue, Retry, SimpleWorker
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import (DeferredJobRegistry, FailedJobRegistry, FinishedJobRegistry,
                         ScheduledJobRegistry, StartedJobRegistry)
from rq.results import Result

import rq_jobs

TARGET = os.environ.get("TARGET", "redis")
HOST = os.environ.get("HOST", "127.0.0.1")
PORT = int(os.environ.get("PORT", "6379"))
PASSWORD = os.environ.get("PASSWORD", "")
NAME = "py-rq"
RUN = uuid.uuid4().hex[:8]
P = f"{NAME}:{RUN}:"  # our own keys and every queue name start with P (RQ adds its rq: prefix)

# RQ wants bytes replies (no decode_responses); it pickles arguments and results.
r = redis.Redis(host=HOST, port=PORT, password=PASSWORD or None, socket_timeout=60)
results = []
workers = 0


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def eq(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what} got {got!r}, want {want!r}")


def feature(fn):
    name = fn.__name__.removeprefix("f_")
    try:
        fn()
        results.append("PASS")
        print(f"PASS {name}", flush=True)
    except Skip as e:
        results.append("SKIP")
        print(f"SKIP {name}: {e}", flush=True)
    except Exception as e:  # noqa: BLE001 — any failure is a FAIL line
        results.append("FAIL")
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        print(f"FAIL {name}: {msg}", flush=True)
    return fn


def queue(name):
    return Queue(P + name, connection=r)


def work(*queues, scheduler=False):
    """One burst of a real worker on these queues; True if it ran a job."""
    global workers
    workers += 1
    w = SimpleWorker(list(queues), connection=r, name=f"{NAME}-{RUN}-{workers}")
    return w.work(burst=True, logging_level="WARNING", with_scheduler=scheduler)


def status(job):
    return Job.fetch(job.id, connection=r).get_status()


def types(job):
    return [res.type for res in job.results()]


def check_result(res, kind, value, what):
    """A Result read back from the stream: its type, value and stream ID."""
    check(res is not None, f"{what}: no result")
    eq(res.type, kind, f"{what} type")
    eq(res.return_value, value, f"{what} return value")
    check(re.fullmatch(r"\d+-\d+", res.id), f"{what}: stream ID {res.id!r}")
    age = datetime.now(timezone.utc) - res.created_at
    check(timedelta(seconds=-2) < age < timedelta(minutes=2), f"{what}: created_at {res.created_at}")


@feature
def f_enqueue():
    q = queue("enqueue")
    eq(q.count, 0, "new queue count")
    jobs = [q.enqueue(rq_jobs.add, i, 10 * i) for i in range(3)]
    for job in jobs:
        eq(str(uuid.UUID(job.id)), job.id, "job id (a UUID)")
    mine = q.enqueue(rq_jobs.add, 1, 2, job_id=f"{NAME}-{RUN}-mine", description="mine")
    eq(mine.id, f"{NAME}-{RUN}-mine", "chosen job id")
    eq(q.count, 4, "Queue.count")
    eq(q.job_ids, [j.id for j in jobs] + [mine.id], "Queue.job_ids (enqueue order)")
    eq(q.get_job_ids(1, 2), [jobs[1].id, jobs[2].id], "Queue.get_job_ids(1, 2)")
    check(q.name in [x.name for x in Queue.all(connection=r)], "Queue.all lists the queue")
    got = Job.fetch(mine.id, connection=r)
    eq(got.func_name, "rq_jobs.add", "fetched func_name")
    eq((got.args, got.kwargs), ((1, 2), {}), "fetched args")
    eq((got.origin, got.description), (q.name, "mine"), "fetched origin, description")
    eq(got.get_status(), JobStatus.QUEUED, "status after enqueue")
    check(got.is_queued and got.enqueued_at is not None, "is_queued, enqueued_at")
    eq(got.get_position(), 3, "position in the queue")
    eq(got.latest_result(), None, "latest_result before it ran")
    eq(got.results(), [], "results() before it ran")
    eq([j.id if j else None for j in Job.fetch_many([jobs[0].id, "nope"], connection=r)],
       [jobs[0].id, None], "Job.fetch_many")
    try:
        Job.fetch(f"{NAME}-{RUN}-missing", connection=r)
        raise AssertionError("Job.fetch of a missing id did not raise")
    except NoSuchJobError:
        pass
    jobs[1].cancel()  # queued -> canceled: off the queue, into the canceled registry
    eq(status(jobs[1]), JobStatus.CANCELED, "status after cancel")
    eq(q.job_ids, [jobs[0].id, jobs[2].id, mine.id], "queue after cancel")
    eq(q.canceled_job_registry.get_job_ids(), [jobs[1].id], "CanceledJobRegistry")
    check(work(q), "the worker ran nothing")
    eq([status(j) for j in jobs + [mine]],
       [JobStatus.FINISHED, JobStatus.CANCELED, JobStatus.FINISHED, JobStatus.FINISHED], "statuses after work")
    eq([Job.fetch(j.id, connection=r).return_value() for j in jobs + [mine]], [0, None, 22, 3], "return values")
    eq(q.count, 0, "Queue.count after work")


@feature
def f_worker():
    q = queue("worker")
    jobs = [q.enqueue(rq_jobs.add, i, 10 * i) for i in range(1, 6)]
    waited = {}

    def waiter():  # an application blocking on the result: XREAD BLOCK on the stream
        t0 = time.monotonic()
        res = Job.fetch(jobs[-1].id, connection=r).latest_result(timeout=20)
        waited.update(res=res, secs=time.monotonic() - t0)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)  # let the waiter block before the results exist
    eq(r.exists(Result.get_key(jobs[-1].id)), 0, "result stream before the worker")
    eq(work(q), True, "worker ran jobs")
    t.join(25)
    check(not t.is_alive(), "latest_result(timeout=20) still blocked")
    check_result(waited["res"], Result.Type.SUCCESSFUL, 55, "blocking latest_result")
    for i, job in enumerate(jobs, 1):
        eq(job.get_status(), JobStatus.FINISHED, f"job {i} status")
        eq(job.return_value(), 11 * i, f"job {i} return_value()")
        eq(job.result, 11 * i, f"job {i} .result")
        latest = job.latest_result()
        check_result(latest, Result.Type.SUCCESSFUL, 11 * i, f"job {i} latest_result")
        eq(job.results(), [latest], f"job {i} results()")
        eq(Result.count(job), 1, f"job {i} Result.count (XLEN)")
        key = Result.get_key(job.id)
        eq(r.type(key), b"stream", f"type of {key}")
        eq([e[0].decode() for e in r.xrange(key)], [latest.id], "XRANGE of the result stream")
        ttl = r.ttl(key)
        check(0 < ttl <= 500, f"result stream TTL {ttl} (the default result_ttl is 500)")
    eq(waited["res"].id, jobs[-1].latest_result().id, "the blocking read's result ID")
    eq(q.count, 0, "Queue.count after the burst")
    # Scored by expiry in whole seconds: ties come back in ID order.
    eq(sorted(FinishedJobRegistry(queue=q).get_job_ids()), sorted(j.id for j in jobs), "FinishedJobRegistry")


@feature
def f_failures():
    q = queue("failures")
    flag = P + "failures:flag"
    job = q.enqueue(rq_jobs.boom, flag)
    eq(work(q), True, "worker ran the job")
    eq(job.get_status(), JobStatus.FAILED, "status after raising")
    failed = FailedJobRegistry(queue=q)
    eq(failed.get_job_ids(), [job.id], "FailedJobRegistry")
    check(job in failed, "job in FailedJobRegistry")
    latest = job.latest_result()
    eq(latest.type, Result.Type.FAILED, "latest_result().type")
    check(latest.exc_string.startswith("Traceback (most recent call last)"), f"exc_string {latest.exc_string!r}")
    check(f"ValueError: boom: {flag} is not set" in latest.exc_string, f"exc_string {latest.exc_string!r}")
    eq(job.exc_info, latest.exc_string, "job.exc_info")
    eq(job.return_value(), None, "return_value() of a failed job")
    r.set(flag, "1")
    job.requeue()
    eq(job.get_status(), JobStatus.QUEUED, "status after requeue")
    eq((failed.count, q.job_ids), (0, [job.id]), "failed count and queue after requeue")
    eq(work(q), True, "worker ran the requeued job")
    eq(job.get_status(), JobStatus.FINISHED, "status after the second run")
    eq(job.return_value(refresh=True), "recovered", "return_value() after the second run")
    eq(types(job), [Result.Type.SUCCESSFUL, Result.Type.FAILED], "results() newest first")
    eq(Result.count(job), 2, "Result.count")
    eq(failed.count, 0, "FailedJobRegistry count")


@feature
def f_retries():
    q = queue("retries")
    ok = q.enqueue(rq_jobs.flaky, P + "retries:ok", 1, retry=Retry(max=2))
    bad = q.enqueue(rq_jobs.flaky, P + "retries:bad", 5, retry=Retry(max=2))
    eq(Job.fetch(ok.id, connection=r).retries_left, 2, "retries_left before")
    eq(work(q), True, "worker ran the jobs")
    eq((ok.get_status(), ok.return_value()), (JobStatus.FINISHED, 2), "fails once then succeeds")
    eq(r.get(P + "retries:ok"), b"2", "runs of the flaky job")
    eq(Job.fetch(ok.id, connection=r).retries_left, 1, "retries_left after one retry")
    eq(types(ok), [Result.Type.SUCCESSFUL], "results() (a raised retry writes none)")
    eq(bad.get_status(), JobStatus.FAILED, "the job failing 3 times with Retry(max=2)")
    eq(r.get(P + "retries:bad"), b"3", "runs of the failing job")
    eq(FailedJobRegistry(queue=q).get_job_ids(), [bad.id], "FailedJobRegistry")
    # A job returning Retry 114 times writes 115 results with XADD MAXLEN ~ 10:
    # Redis trims whole stream nodes of 100 entries, so 15 are left.
    job = q.enqueue(rq_jobs.again, P + "retries:again", 114)
    eq(work(q), True, "worker ran the job returning Retry")
    eq((job.get_status(), job.return_value()), (JobStatus.FINISHED, 115), "after 115 runs")
    got = job.results()
    eq([res.type for res in got], [Result.Type.SUCCESSFUL] + [Result.Type.RETRIED] * 14, "results() after trims")
    ids = [tuple(map(int, res.id.split("-"))) for res in got]
    eq(ids, sorted(ids, reverse=True), "result IDs newest first")
    eq(Result.count(job), 15, "Result.count (XLEN)")


@feature
def f_scheduled():
    q = queue("scheduled")
    t0 = datetime.now(timezone.utc)
    later = q.enqueue_in(timedelta(seconds=3), rq_jobs.add, 1, 1)
    at = q.enqueue_at(t0 + timedelta(seconds=3), rq_jobs.add, 2, 2)
    t1 = datetime.now(timezone.utc)
    reg = ScheduledJobRegistry(queue=q)
    eq(sorted(reg.get_job_ids()), sorted([later.id, at.id]), "ScheduledJobRegistry")
    eq([status(later), status(at)], [JobStatus.SCHEDULED] * 2, "statuses")
    for job in (later, at):  # scores are whole seconds, rounded down
        when = reg.get_scheduled_time(job)
        check(t0 + timedelta(seconds=2) < when <= t1 + timedelta(seconds=3), f"scheduled time {when} (now {t0})")
    eq(q.count, 0, "queue count while scheduled")
    eq(work(q, scheduler=True), False, "a burst before they are due ran a job")
    eq(reg.count, 2, "still scheduled after an early burst")
    time.sleep(max(0.0, (t1 + timedelta(seconds=3.2) - datetime.now(timezone.utc)).total_seconds()))
    eq(work(q, scheduler=True), True, "the burst after they are due ran nothing")
    eq(reg.count, 0, "ScheduledJobRegistry after the scheduler moved them")
    eq([status(later), status(at)], [JobStatus.FINISHED] * 2, "statuses after work")
    eq([later.return_value(), at.return_value()], [2, 4], "return values")
    eq(r.exists(f"rq:scheduler-lock:{q.name}"), 0, "the burst scheduler's lock released")


@feature
def f_dependencies():
    parents, children = queue("parents"), queue("children")
    order = P + "deps:order"
    parent = parents.enqueue(rq_jobs.record, order, "parent")
    child = children.enqueue(rq_jobs.record, order, "child", depends_on=parent)
    eq(status(child), JobStatus.DEFERRED, "child status")
    eq(children.count, 0, "children queue holds the deferred child")
    eq(DeferredJobRegistry(queue=children).get_job_ids(), [child.id], "DeferredJobRegistry")
    eq(parent.dependent_ids, [child.id], "parent.dependent_ids")
    eq(child.dependency.id, parent.id, "child.dependency")
    eq(work(children), False, "a worker on the children queue ran the deferred child")
    eq(work(parents), True, "worker ran the parent")
    eq((status(parent), status(child)), (JobStatus.FINISHED, JobStatus.QUEUED), "after the parent ran")
    eq(children.job_ids, [child.id], "the child enqueued when its parent finished")
    eq(DeferredJobRegistry(queue=children).count, 0, "DeferredJobRegistry after the parent")
    eq(work(children), True, "worker ran the child")
    eq(r.lrange(order, 0, -1), [b"parent", b"child"], "run order")
    eq(child.return_value(), "child", "child return value")
    # A parent that fails leaves its dependent deferred.
    bad = parents.enqueue(rq_jobs.boom, P + "deps:never-set")
    orphan = children.enqueue(rq_jobs.record, order, "orphan", depends_on=bad)
    eq(work(parents, children), True, "worker ran the failing parent")
    eq((status(bad), status(orphan)), (JobStatus.FAILED, JobStatus.DEFERRED), "failed parent, child")
    eq(r.lrange(order, 0, -1), [b"parent", b"child"], "the orphan did not run")


@feature
def f_registries():
    q = queue("registries")
    who = q.enqueue(rq_jobs.whoami)
    jobs = [q.enqueue(rq_jobs.add, i, i) for i in range(3)]
    started, finished = StartedJobRegistry(queue=q), FinishedJobRegistry(queue=q)
    eq((started.count, finished.count), (0, 0), "started, finished before work")
    eq(work(q), True, "worker ran the jobs")
    seen = who.return_value()
    eq(seen, {"id": who.id, "status": "started", "started": [who.id]}, "what the running job saw")
    eq((started.count, finished.count), (0, 4), "started, finished after work")
    eq(sorted(finished.get_job_ids()), sorted([who.id] + [j.id for j in jobs]), "FinishedJobRegistry ids")
    jobs[0].delete()
    check(not Job.exists(jobs[0].id, connection=r), "the deleted job still exists")
    eq(r.exists(f"rq:job:{jobs[0].id}"), 0, "the deleted job's hash")
    eq(sorted(finished.get_job_ids()), sorted([who.id, jobs[1].id, jobs[2].id]), "FinishedJobRegistry after delete")
    try:
        Job.fetch(jobs[0].id, connection=r)
        raise AssertionError("Job.fetch of a deleted job did not raise")
    except NoSuchJobError:
        pass
    more = [q.enqueue(rq_jobs.add, i, 1) for i in range(4)]
    eq(q.count, 4, "queue count before empty")
    eq(q.empty(), 4, "Queue.empty() (a Lua script) removed")
    eq(q.count, 0, "queue count after empty")
    eq([Job.exists(j.id, connection=r) for j in more], [False] * 4, "emptied jobs exist")
    eq(work(q), False, "worker on an emptied queue ran a job")
    q.delete()
    check(q.name not in [x.name for x in Queue.all(connection=r)], "Queue.all after delete")


print(f"SUMMARY {NAME} {TARGET}: {results.count('PASS')} passed, {results.count('FAIL')} failed, "
      f"{results.count('SKIP')} skipped", flush=True)
sys.exit(1 if "FAIL" in results else 0)
