"""The limit values ALNAIR_MEMORY_LIMIT refuses, and those ALNAIR_COMPUTE_LIMIT and ALNAIR_COMPUTE_SHARE refuse
(one grammar), with the reason the intercept gives (intercept/state.c): one table for the intercept's tests and the
webhook's (alnair.injector.limits), which refuses the same annotation values for the same reasons. GOOD_COMPUTE:
compute values both accept."""

WANT_BYTES = "want bytes like 8Gi, 512M or 1073741824, or per device 0=8Gi,1=4Gi"
FRACTIONAL = "not a whole number of bytes"
TOO_BIG = "more than 1Pi (2^50 bytes)"
ZERO = "a limit of 0 bytes (leave it unset for no limit)"
EMPTY_ITEM = "an empty item in the per-device list"
NOT_AN_ITEM = "an item of the per-device list is not DEV=VALUE"
BAD_DEVICE = "a device index is not 0-63"
TWICE = "a device is given twice"
WANT_PERCENT = "want a percent 1-100, or per device 0=30,1=70"

BAD_MEMORY = [
    # not numbers of bytes at all: strtod used to read all of these
    ("1e30", "1e30", WANT_BYTES),
    ("inf", "inf", WANT_BYTES),
    ("nan", "nan", WANT_BYTES),
    ("-inf", "-inf", WANT_BYTES),
    ("infinity", "infinity", WANT_BYTES),
    ("1e3", "1e3", WANT_BYTES),
    ("0x100000", "0x100000", WANT_BYTES),
    ("-1", "-1", WANT_BYTES),
    ("-0", "-0", WANT_BYTES),
    ("+1Mi", "+1Mi", WANT_BYTES),
    ("lots", "lots", WANT_BYTES),
    ("1_000_000", "1_000_000", WANT_BYTES),
    ("1.", "1.", WANT_BYTES),
    (".5Mi", ".5Mi", WANT_BYTES),
    ("1.5.0Mi", "1.5.0Mi", WANT_BYTES),
    # trailing or leading garbage, spaces, a unit that is not one
    ("1Mi ", "1Mi ", WANT_BYTES),
    (" 1Mi", " 1Mi", WANT_BYTES),
    ("1 Mi", "1 Mi", WANT_BYTES),
    ("1Mix", "1Mix", WANT_BYTES),
    ("1MiBB", "1MiBB", WANT_BYTES),
    ("1iB", "1iB", WANT_BYTES),
    ("1E", "1E", WANT_BYTES),
    ("1024B", "1024B", WANT_BYTES),
    ("1MI", "1MI", WANT_BYTES),
    ("1Mi\n", "1Mi\\x0a", WANT_BYTES),
    ('1"Mi\\', "1\\x22Mi\\x5c", WANT_BYTES),  # escaped: still one line
    ("1Mi,2Mi", "1Mi,2Mi", WANT_BYTES),
    (",", ",", WANT_BYTES),
    # fractions of a byte
    ("0.5", "0.5", FRACTIONAL),
    ("1.5", "1.5", FRACTIONAL),
    ("0.1", "0.1", FRACTIONAL),
    ("1.3Ki", "1.3Ki", FRACTIONAL),
    ("1.0001K", "1.0001K", FRACTIONAL),
    ("0=1Mi,1=0.5", "0=1Mi,1=0.5", FRACTIONAL),
    # past the bound, or past uint64
    ("1125899906842625", "1125899906842625", TOO_BIG),
    ("2Pi", "2Pi", TOO_BIG),
    ("1.5Pi", "1.5Pi", TOO_BIG),
    ("1025Ti", "1025Ti", TOO_BIG),
    ("18446744073709551616", "18446744073709551616", TOO_BIG),
    ("99999999999999999999999999Gi", "99999999999999999999999999Gi", TOO_BIG),
    ("1" * 1000, "1" * 151 + "...", TOO_BIG),  # shown cut short, still one line
    # zero would silently mean no limit
    ("0", "0", ZERO),
    ("0Gi", "0Gi", ZERO),
    ("0.0", "0.0", ZERO),
    ("0=1Mi,1=0", "0=1Mi,1=0", ZERO),
    # per-device lists
    ("0=1Mi,", "0=1Mi,", EMPTY_ITEM),
    (",0=1Mi", ",0=1Mi", EMPTY_ITEM),
    ("0=1Mi,,1=2Mi", "0=1Mi,,1=2Mi", EMPTY_ITEM),
    ("0=1Mi,2Mi", "0=1Mi,2Mi", NOT_AN_ITEM),
    ("64=1Mi", "64=1Mi", BAD_DEVICE),
    ("-1=1Mi", "-1=1Mi", BAD_DEVICE),
    ("=1Mi", "=1Mi", BAD_DEVICE),
    ("a=1Mi", "a=1Mi", BAD_DEVICE),
    (" 0=1Mi", " 0=1Mi", BAD_DEVICE),
    ("0x0=1Mi", "0x0=1Mi", BAD_DEVICE),
    ("99999999999999999999=1Mi", "99999999999999999999=1Mi", BAD_DEVICE),
    ("0=1Gi,0=2Gi", "0=1Gi,0=2Gi", TWICE),
    ("0=1Mi,00=2Mi", "0=1Mi,00=2Mi", TWICE),
    ("1=1Mi,0=1Mi,1=1Mi", "1=1Mi,0=1Mi,1=1Mi", TWICE),
    ("0=", "0=", WANT_BYTES),
    ("0=1Mi=2Mi", "0=1Mi=2Mi", WANT_BYTES),
    ("0=1Mi ,1=2Mi", "0=1Mi ,1=2Mi", WANT_BYTES),
    ("0=1Mi;1=2Mi", "0=1Mi;1=2Mi", WANT_BYTES),
]

BAD_COMPUTE = [
    ("250", WANT_PERCENT),
    ("0", WANT_PERCENT),
    ("101", WANT_PERCENT),
    ("-30", WANT_PERCENT),
    ("+30", WANT_PERCENT),
    ("30%", WANT_PERCENT),
    ("30.0", WANT_PERCENT),
    ("30.5", WANT_PERCENT),
    (" 30", WANT_PERCENT),
    ("30 ", WANT_PERCENT),
    ("30abc", WANT_PERCENT),
    ("1e1", WANT_PERCENT),
    ("inf", WANT_PERCENT),
    ("nan", WANT_PERCENT),
    ("0x1e", WANT_PERCENT),
    ("99999999999999999999", WANT_PERCENT),
    ("0=30,1=0", WANT_PERCENT),
    ("0=30;1=70", WANT_PERCENT),
    ("0=", WANT_PERCENT),
    ("0=30,0=70", TWICE),
    ("0=30,", EMPTY_ITEM),
    (",0=30", EMPTY_ITEM),
    ("0=30,70", NOT_AN_ITEM),
    ("64=30", BAD_DEVICE),
    ("-1=30", BAD_DEVICE),
]

# The values of tests/intercept/test_configuration.py's accepted compute syntax (there with the devices each sets).
GOOD_COMPUTE = ["30", "1", "100", "007", "0=30,1=70", "63=1,5=100"]
