import pytest

from hvexp import params


@pytest.mark.parametrize("want,got,match", [
    # bool and invbool read back Y or N; kstrtobool() looks at the first character (and
    # the second of on/off).
    ("1", "Y", True), ("y", "Y", True), ("Y", "Y", True), ("yes", "Y", True), ("on", "Y", True),
    ("ON", "Y", True), ("oN", "Y", True), ("10", "Y", True),
    ("0", "N", True), ("n", "N", True), ("N", "N", True), ("no", "N", True), ("off", "N", True),
    ("OfF", "N", True), ("0x10", "N", True),
    ("1", "N", False), ("0", "Y", False), ("off", "Y", False), ("on", "N", False),
    # refused by kstrtobool(): the guest's value cannot be what the variant asked for
    ("2", "Y", False), ("2", "N", False), ("o", "N", False), ("ox", "Y", False), ("", "N", False),
    ("true", "Y", False), ("false", "N", False),
    # a value given in double quotes on the command line loses them
    ('"1"', "Y", True),
])
def test_bool_parameters(want: str, got: str, match: bool) -> None:
    assert params.param_matches(want, got) is match


@pytest.mark.parametrize("want,got,match", [
    ("16", "16", True), ("0x10", "16", True), ("0X10", "16", True), ("0x1f", "31", True), ("0x1F", "31", True),
    ("+16", "16", True), ("010", "8", True), ("0", "0", True), ("-0", "0", True), ("+0x10", "16", True),
    ("-0x10", "-16", True), ("-1", "-1", True), ("16\n", "16", True),
    ("16", "0x000010", True),           # hexint reads back as %#08x
    ("18446744073709551615", "18446744073709551615", True),
    ("16", "17", False), ("0x10", "10", False), ("010", "10", False),
    # refused by kstrtoint() and its siblings: no match whatever the guest reads
    ("08", "8", False), ("0x 8", "8", False), ("+-2", "-2", False), ("-+2", "-2", False), ("--2", "2", False),
    ("++2", "2", False), ("2 ", "2", False), (" 2", "2", False), ("1e3", "1000", False),
    ("18446744073709551616", "0", False),    # past 64 bits: -ERANGE, not a wrap to 0
    ("-1", "4294967295", False),             # a uint refuses "-1"; it does not wrap
])
def test_integer_parameters(want: str, got: str, match: bool) -> None:
    assert params.param_matches(want, got) is match


@pytest.mark.parametrize("want,got,match", [
    ("y", "1", True), ("on", "1", True), ("n", "0", True), ("off", "0", True),
    ("on", "0", False), ("no", "1", False),
    # kstrtobool() reads only the first character: what an int refuses, a bint takes
    ("0x", "0", True), ("1 ", "1", True), ("2", "1", False),
])
def test_bint_parameters_read_back_as_1_or_0(want: str, got: str, match: bool) -> None:
    assert params.param_matches(want, got) is match


@pytest.mark.parametrize("want,got,match", [
    ("mq-deadline", "mq-deadline", True), ('"abc"', "abc", True), ("", "", True),
    ("abc", "abd", False), ("abc", "", False), ("Yes", "yes", False),
])
def test_other_values_compare_as_text(want: str, got: str, match: bool) -> None:
    assert params.param_matches(want, got) is match


def test_kernel_parsers() -> None:
    assert params.kstrtobool("Yellow") is True and params.kstrtobool("0n") is False
    assert params.kstrtobool("On") is True and params.kstrtobool("oFF") is False
    assert params.kstrtobool("x") is None and params.kstrtobool("") is None
    assert params.kstrtoint("0x7fffffff") == 2 ** 31 - 1
    assert params.kstrtoint("-9223372036854775808") == -2 ** 63
    assert params.kstrtoint("-9223372036854775809") is None
    assert params.kstrtoint("0777") == 511 and params.kstrtoint("0779") is None
    assert params.kstrtoint("") is None and params.kstrtoint("+") is None and params.kstrtoint("-") is None
