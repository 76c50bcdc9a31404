"""Job functions for app_rq.py. RQ stores a job's function by name
("rq_jobs.add"), so they live in a module the worker can import."""
from rq import Retry, get_current_job
from rq.registry import StartedJobRegistry


def _redis():
    return get_current_job().connection


def add(a, b):
    return a + b


def whoami():
    """What the running job sees of itself: its status and the started registry."""
    job = get_current_job()
    started = StartedJobRegistry(job.origin, connection=job.connection)
    return {"id": job.id, "status": job.get_status(refresh=True).value,
            "started": started.get_job_ids(cleanup=False)}


def boom(flag_key):
    """Raises until flag_key is set."""
    if _redis().get(flag_key) is None:
        raise ValueError(f"boom: {flag_key} is not set")
    return "recovered"


def flaky(counter_key, failures):
    """Raises on the first `failures` runs (counted in Redis), then returns the run number."""
    n = _redis().incr(counter_key)
    if n <= failures:
        raise RuntimeError(f"flaky run {n}")
    return n


def again(counter_key, times):
    """Returns Retry (RQ 2's "run me again") `times` times, then the run number."""
    n = _redis().incr(counter_key)
    return Retry(max=times + 1) if n <= times else n


def record(list_key, name):
    """Appends name to a Redis list: the order jobs ran in."""
    _redis().rpush(list_key, name)
    return name
