"""SGLang-compatible simulator of a speculative-decoding server (CPU only, standard library only).

Run it with ``python -m pytest_specperf.sim --model-path M [sglang flags] [--sim-* flags]``. The numbers it
runs on live in profiles (``sim/profiles/*.toml``): ``profile_files`` reads them into a ``Profile``
(``profile``), which derives the expected cycle times, accept lengths and throughputs from the same numbers.
"""

from .profile import DEFAULT_PROFILE, Profile, SpecConfig
from .profile_files import available_profiles, load_profile

__all__ = ["DEFAULT_PROFILE", "Profile", "SpecConfig", "available_profiles", "load_profile"]
