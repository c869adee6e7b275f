"""SGLang-compatible simulator of a speculative-decoding server (CPU only, standard library only).

Run it with ``python -m pytest_specperf.sim --model-path M [sglang flags] [--sim-* flags]``. The numbers it
runs on live in profiles (``sim/profiles/*.toml``); ``pytest_specperf.sim.profile`` loads them and derives
the expected cycle times, accept lengths and throughputs from the same numbers.
"""

from .profile import DEFAULT_PROFILE, Profile, SpecConfig, available_profiles, load_profile

__all__ = ["DEFAULT_PROFILE", "Profile", "SpecConfig", "available_profiles", "load_profile"]
