"""Nothing a writer published is lost: a job that records and exits within 200 ms, long before Prometheus's
next scrape (every 15 s), is still scraped with its exact final counters, its segment then reclaimed."""

from __future__ import annotations

import textwrap

from support import PythonProgram, wait_until
from test_prometheus_scrape import query

SHORT_JOB = textwrap.dedent("""
    import alnair, time
    started = time.monotonic()
    alnair.counter("images").inc(4096)
    with alnair.phase("load"):
        pass
    print("ready", flush=True)
    time.sleep(max(0.0, 0.2 - (time.monotonic() - started)))  # and exits, 200 ms after it began
""")


def test_a_job_shorter_than_a_scrape_interval_is_scraped_with_its_final_counters(start_exporter, prometheus, shm_dir):
    exporter = start_exporter(f"--shm.dir={shm_dir}", "--collector.python.interval=200ms", "--shm.linger=45s")
    prom = prometheus(f"127.0.0.1:{exporter.port}", interval="15s")
    wait_until(lambda: query(prom, 'up{job="alnair"} == 1'), timeout=300)  # scraping: the next scrape is <= 15 s away
    job = PythonProgram(SHORT_JOB, shm_dir)
    assert job.proc.wait(30) == 0
    assert list(shm_dir.glob("alnair.python.*")) and (shm_dir / "alnair.reader").is_file()  # the segment stayed
    images = wait_until(
        lambda: query(prom, f'alnair_python_custom_total{{pid="{job.pid}",name="images"}}'), timeout=120
    )
    assert float(images[0]["value"][1]) == 4096
    loads = query(prom, f'alnair_python_phase_completions_total{{pid="{job.pid}",name="load"}}')
    assert float(loads[0]["value"][1]) == 1
    exited = query(prom, f'alnair_python_process_exited_timestamp_seconds{{pid="{job.pid}"}}')
    assert exited and float(exited[0]["value"][1]) > 0
    wait_until(lambda: not list(shm_dir.glob("alnair.python.*")), timeout=300)  # reclaimed after 45 s
