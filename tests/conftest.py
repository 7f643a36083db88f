"""Settings shared by every test tier."""

from hypothesis import settings

# Wall-clock deadlines per example are noise on a shared 2-core machine, and distributed
# examples include process round trips; correctness, not speed, is what tests check.
settings.register_profile("hocket", deadline=None)
settings.load_profile("hocket")
