"""The variables a container image fixes are one fingerprint entry, so an image change is one drift line.

tests/data/cuda-images/ holds the variables NVIDIA's CUDA images set (`NVIDIA_REQUIRE_CUDA`, `CUDA_VERSION`,
`NCCL_VERSION`, `NVIDIA_VISIBLE_DEVICES`, `NVIDIA_DRIVER_CAPABILITIES`), as the Dockerfiles of
gitlab.com/nvidia/container-images/cuda (dist/12.6.3 and dist/12.9.1) set them: the 12.9.1 image's
`NVIDIA_REQUIRE_CUDA` is 2165 characters long, as long as the one the GPU night's image carried.
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_specperf.measure.fingerprint import IMAGE_ENTRY, Fingerprint, capture
from pytest_specperf.verdict.drift import Change, diff

IMAGES = Path(__file__).parent.parent / "data" / "cuda-images"
#: What a person tunes: the phantom baseline's variables (docs/story.md) stay entries of their own.
TUNING = {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "16", "OMP_NUM_THREADS": "8", "CUDA_VISIBLE_DEVICES": "0"}


def image(version: str) -> dict[str, str]:
    lines = (IMAGES / f"cuda-{version}.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def take(server_env: dict[str, str]) -> Fingerprint:
    return capture(
        launch_identity={"launcher": "vllm", "model": "llama-110m"},
        server_info={"version": "0.26.0"},
        loads=None,
        server_env=server_env,
        gpu_probe=lambda: None,
    )


def test_the_image_variables_are_one_entry_and_the_tuning_ones_stay() -> None:
    environment = take({**image("12.9.1"), **TUNING}).environment
    assert "NVIDIA_REQUIRE_CUDA" not in environment and "CUDA_VERSION" not in environment
    assert {name: environment[name] for name in TUNING} == TUNING
    assert environment["NVIDIA_VISIBLE_DEVICES"] == "all"  # placement, set per job: not the image's
    names = [word.split("=")[0] for word in environment[IMAGE_ENTRY].split()[1:]]
    assert names == ["CUDA_VERSION", "NCCL_VERSION", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA"]
    assert len(environment[IMAGE_ENTRY]) < 200  # was 2.3 KB in full


def test_an_image_change_is_one_drift_line() -> None:
    before, after = take({**image("12.6.3"), **TUNING}), take({**image("12.9.1"), **TUNING})
    changes = diff(before, after).environment
    assert len(changes) == 1
    (change,) = changes
    assert change.name == "image variables changed (CUDA_VERSION, NCCL_VERSION, NVIDIA_REQUIRE_CUDA)"
    assert change.old.startswith("digest ") and change.new.startswith("digest ") and change.old != change.new
    assert len(str(change)) < 120


def test_a_lost_tuning_variable_is_still_named_on_its_own() -> None:
    """The phantom baseline: NCCL tuning lost on restart, the image unchanged."""
    before = take({**image("12.9.1"), **TUNING})
    after = take({**image("12.9.1"), "OMP_NUM_THREADS": "8", "CUDA_VISIBLE_DEVICES": "0"})
    assert diff(before, after).environment == [
        Change("NCCL_ALGO", "Ring", "unset"),
        Change("NCCL_MIN_NCHANNELS", "16", "unset"),
    ]


def stored_by_the_current_release(server_env: dict[str, str]) -> Fingerprint:
    """A fingerprint as a history stored before this change holds it: the variables in full."""
    fresh = take(server_env)
    document = fresh.to_dict()
    document["environment"] = {
        **{k: v for k, v in document["environment"].items() if k != IMAGE_ENTRY},
        **{k: v for k, v in server_env.items() if k.startswith(("NVIDIA_", "CUDA_", "NCCL_", "OMP_"))},
    }
    assert "NVIDIA_REQUIRE_CUDA" in json.dumps(document)
    return Fingerprint.from_dict(json.loads(json.dumps(document)))


def test_a_history_stored_with_the_variables_in_full_compares_with_a_compact_one() -> None:
    old = stored_by_the_current_release({**image("12.9.1"), **TUNING})
    assert not diff(old, take({**image("12.9.1"), **TUNING}))
    changes = diff(stored_by_the_current_release({**image("12.6.3"), **TUNING}), take({**image("12.9.1"), **TUNING}))
    assert [c.name for c in changes.environment] == [
        "image variables changed (CUDA_VERSION, NCCL_VERSION, NVIDIA_REQUIRE_CUDA)"
    ]


def test_a_compact_fingerprint_round_trips() -> None:
    fingerprint = take({**image("12.9.1"), **TUNING})
    again = Fingerprint.from_dict(json.loads(json.dumps(fingerprint.to_dict())))
    assert again == fingerprint and again.redacted() == fingerprint
