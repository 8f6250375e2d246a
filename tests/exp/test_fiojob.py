import pytest

from hvexp import fiojob


def test_adds_logs_and_filename_to_existing_global() -> None:
    out = fiojob.prepare("[global]\nruntime=30\n[a]\nrw=read\n", 500)
    assert out.splitlines()[:5] == ["[global]", "write_iops_log", "write_lat_log", "log_avg_msec=500", "filename=${DISK}"]
    assert "runtime=30" in out


def test_creates_global_and_keeps_the_jobs_filename() -> None:
    out = fiojob.prepare("[a]\nfilename=/dev/sdb\nrw=read\n", 1000)
    assert out.startswith("[global]\nwrite_iops_log\n")
    assert "filename=${DISK}" not in out


def test_runtime_override_and_seconds() -> None:
    job = "[global]\nruntime=30\n[a]\nruntime=2m\n[b]\nrw=read\n"
    assert fiojob.seconds(job) == 150
    assert fiojob.seconds(fiojob.prepare(job, 1000, runtime=5)) == 10
    assert fiojob.seconds("[a]\nrw=read\n") == 60


def test_job_without_a_job_section_is_refused() -> None:
    with pytest.raises(fiojob.JobError, match="no \\[job\\] section"):
        fiojob.prepare("[global]\nrw=read\n", 1000)


def test_bad_runtime() -> None:
    with pytest.raises(fiojob.JobError, match="not a number"):
        fiojob.seconds("[a]\nruntime=soon\n")


def test_seconds_of_stonewalled_groups_and_ramp() -> None:
    job = "[global]\nruntime=10\nramp_time=2\n[a]\nrw=read\n[b]\nstonewall\nrw=write\n"
    assert fiojob.seconds(job) == 24
    assert fiojob.seconds("[global]\nruntime=30\n[a]\n[b]\n") == 30      # a and b run together


def test_reported_names_and_directions() -> None:
    job = ("[global]\nrw=randread\n[a]\nnumjobs=2\n[b]\nrw=randrw\nrwmixread=100\n[c]\nrw=trimwrite ; comment\n"
           "[d]\nrw=write\nverify=crc32c\n")
    r = fiojob.reported(job)
    assert r is not None and list(r) == ["a", "b", "c", "d"]
    assert r["a"].dirs == {"read"} and r["a"].sections == ["a"]
    assert r["b"].dirs == {"read"}                   # rwmixread=100: no writes
    assert r["c"].dirs == {"trim", "write"}
    assert r["d"].dirs == {"read", "write"}          # the verify phase reads
    r = fiojob.reported("[a]\n")
    assert r is not None and r["a"].dirs == {"read"}           # fio's default: rw=read


def test_group_reporting_names_a_group_after_its_first_job() -> None:
    job = "[global]\ngroup_reporting\n[a]\nrw=read\nnumjobs=3\n[b]\nrw=write\n[c]\nstonewall\nrw=trim\n"
    r = fiojob.reported(job)
    assert r is not None and list(r) == ["a", "c"]
    assert r["a"].sections == ["a", "b"] and r["a"].dirs == {"read", "write"}
    r = fiojob.reported(job.replace("group_reporting", "group_reporting=0"))
    assert r is not None and list(r) == ["a", "b", "c"]


def test_a_jobs_name_option_and_stats() -> None:
    r = fiojob.reported("[a]\nname=wal\nrw=write\n[b]\nstats=0\n")
    assert r is not None and list(r) == ["wal"] and r["wal"].sections == ["a"]


def test_percentiles_reported() -> None:
    r = fiojob.reported("[a]\npercentile_list=99:99.9\n[b]\nclat_percentiles=0\n[c]\nclat_percentiles=0\nlat_percentiles=1\n")
    assert r is not None
    assert r["a"].percentiles == {99.0, 99.9} and r["b"].percentiles == set()
    assert r["c"].percentiles is not None and 50.0 in r["c"].percentiles


def test_included_files_are_not_known() -> None:
    assert fiojob.reported("[a]\ninclude more.fio\n") is None
