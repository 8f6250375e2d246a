from pathlib import Path

import pytest

from conftest import spec_text
from hvexp import spec


def test_sections_keys_heredoc_and_comments() -> None:
    s = spec.parse(spec_text(exp_extra="vcpus = 4   # four\ntunables = nr_requests=56 ; not a comment"), "x.exp")
    assert s.experiment.get("vcpus") == "4"
    assert s.experiment.get("tunables") == "nr_requests=56 ; not a comment"
    assert s.experiment.get("fio", "").startswith("[global]\nruntime=5\n[wal]")
    assert list(s.variants) == ["stock", "shared"]
    assert s.value("shared", "patch") == "none"
    assert s.value("stock", "vcpus") == "4"          # inherited from [experiment]
    assert s.disks[0].get("backend") == "null"


def test_expect_may_repeat_and_keeps_lines() -> None:
    s = spec.parse(spec_text(stock_extra="expect = wal.write.iops >= 10\nexpect = wal.write.lat <= 5"))
    assert [t for t, _ in s.variants["stock"].expects] == ["wal.write.iops >= 10", "wal.write.lat <= 5"]
    assert all(n > 0 for _, n in s.variants["stock"].expects)


@pytest.mark.parametrize("extra,where,message", [
    ("vcpus = 2\nvcpus = 4", "exp", "'vcpus' given twice"),
    ("colour = red", "exp", "unknown key 'colour' in [experiment]"),
    ("published = x", "exp", "unknown key 'published' in [experiment]"),
    ("nonsense line", "stock", "expected 'key = value'"),
    ("description = <<EOT\nnever closed", "stock", "never closed"),
])
def test_errors_name_file_and_line(extra: str, where: str, message: str) -> None:
    text = spec_text(exp_extra=extra) if where == "exp" else spec_text(stock_extra=extra)
    with pytest.raises(spec.SpecError) as e:
        spec.parse(text, "my.exp")
    assert message in str(e.value)
    assert str(e.value).startswith("my.exp:")
    assert e.value.line > 0


def test_structure_errors() -> None:
    with pytest.raises(spec.SpecError, match="no \\[variant NAME\\]"):
        spec.parse("[experiment]\nfio = <<E\n[j]\nE\n")
    with pytest.raises(spec.SpecError, match="needs the fio job"):
        spec.parse("[experiment]\n[variant a]\n")
    with pytest.raises(spec.SpecError, match="defined twice"):
        spec.parse(spec_text() + "\n[variant stock]\n")
    with pytest.raises(spec.SpecError, match="unknown section"):
        spec.parse("[experimnet]\n")
    with pytest.raises(spec.SpecError, match="before any"):
        spec.parse("a = b\n")


def test_shipped_specs_parse() -> None:
    import glob, os
    from conftest import ROOT
    files = glob.glob(os.path.join(ROOT, "experiments", "*.exp"))
    assert files
    for f in files:
        s = spec.load(f)
        assert s.variants


def test_bom_trailing_comments_and_misplaced_expect(tmp_path: Path) -> None:
    p = tmp_path / "bom.exp"
    p.write_bytes("\ufeff".encode() + spec_text().replace("[variant stock]", "[variant stock]   # the baseline").encode())
    assert list(spec.load(str(p)).variants) == ["stock", "shared"]
    with pytest.raises(spec.SpecError, match="not in \\[disk\\]"):
        spec.parse(spec_text().replace("size = 4G", "size = 4G\nexpect = a.read.iops > 1"))
    with pytest.raises(spec.SpecError, match="unknown section|expected"):
        spec.parse(spec_text().replace("[variant shared]", "[variant ..]"))
