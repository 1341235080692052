"""The profile tests' shared fixture: test_profile_hostile.py's Prometheus double."""

import test_profile_hostile

serve = test_profile_hostile.serve
