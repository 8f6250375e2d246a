import pytest

from hvexp import fiojob


def test_adds_logs_and_filename_to_existing_global():
    out = fiojob.prepare("[global]\nruntime=30\n[a]\nrw=read\n", 500)
    assert out.splitlines()[:5] == ["[global]", "write_iops_log", "write_lat_log", "log_avg_msec=500", "filename=${DISK}"]
    assert "runtime=30" in out


def test_creates_global_and_keeps_the_jobs_filename():
    out = fiojob.prepare("[a]\nfilename=/dev/sdb\nrw=read\n", 1000)
    assert out.startswith("[global]\nwrite_iops_log\n")
    assert "filename=${DISK}" not in out


def test_runtime_override_and_seconds():
    job = "[global]\nruntime=30\n[a]\nruntime=2m\n[b]\nrw=read\n"
    assert fiojob.seconds(job) == 150
    assert fiojob.seconds(fiojob.prepare(job, 1000, runtime=5)) == 10
    assert fiojob.seconds("[a]\nrw=read\n") == 60


def test_job_without_a_job_section_is_refused():
    with pytest.raises(fiojob.JobError, match="no \\[job\\] section"):
        fiojob.prepare("[global]\nrw=read\n", 1000)


def test_bad_runtime():
    with pytest.raises(fiojob.JobError, match="not a number"):
        fiojob.seconds("[a]\nruntime=soon\n")


def test_seconds_of_stonewalled_groups_and_ramp():
    job = "[global]\nruntime=10\nramp_time=2\n[a]\nrw=read\n[b]\nstonewall\nrw=write\n"
    assert fiojob.seconds(job) == 24
    assert fiojob.seconds("[global]\nruntime=30\n[a]\n[b]\n") == 30      # a and b run together
