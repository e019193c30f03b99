"""The tests and benchmarks carry their own data: nothing reads beside the repository.

Two guards: a static one here (no source in ``tests/`` or ``benchmarks/`` names a path that
climbs out of the repository), and the audit hook of ``conftest.py`` (no file beside the
repository is opened while the suite runs), exercised here on a throwaway repository.
"""

from __future__ import annotations

import ast
import getpass
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted([*REPO.glob("tests/**/*.py"), *REPO.glob("benchmarks/**/*.py")])

#: A string literal whose path has a ``..`` segment or names the reference folder ``shared``.
OUTWARD = re.compile(r"(^|/)(\.\.|shared)(/|$)")
PATH_CALLS = {"Path", "PurePath", "PosixPath"}
SAME_LEVEL = {"resolve", "absolute", "expanduser", "abspath", "realpath", "normpath"}


class _Levels:
    """How deep below the repository's root a path expression points (0 is the root itself).

    Follows ``__file__`` through ``Path(...)``, ``.resolve()``, ``.parent``, ``.parents[n]``,
    ``/ "a/b"``, ``os.path.dirname`` and ``os.path.join``, and through names assigned from such
    expressions. ``None`` means the expression is not such a path.
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.names: dict[str, int] = {}

    def of(self, node: ast.AST) -> int | None:
        match node:
            case ast.Name(id="__file__"):
                return self.depth
            case ast.Name(id=name):
                return self.names.get(name)
            case ast.Attribute(value=value, attr="parent"):
                return self._up(self.of(value), 1)
            case ast.Subscript(
                value=ast.Attribute(value=value, attr="parents"), slice=ast.Constant(value=int(n))
            ):
                return self._up(self.of(value), n + 1)
            case ast.BinOp(left=left, op=ast.Div(), right=ast.Constant(value=str(part))):
                return self._down(self.of(left), part)
            case ast.Call(func=ast.Name(id=f), args=[arg]) if f in PATH_CALLS:
                return self.of(arg)
            case ast.Call(func=ast.Attribute(value=value, attr=attr), args=[]) if (
                attr in SAME_LEVEL
            ):
                return self.of(value)
            case ast.Call(func=ast.Attribute(attr=attr), args=[arg]) if attr in SAME_LEVEL:
                return self.of(arg)
            case ast.Call(func=ast.Attribute(attr="dirname"), args=[arg]):
                return self._up(self.of(arg), 1)
            case ast.Call(func=ast.Attribute(attr="join"), args=[first, *rest]):
                level = self.of(first)
                for more in rest:
                    if not (isinstance(more, ast.Constant) and isinstance(more.value, str)):
                        return None
                    level = self._down(level, more.value)
                return level
        return None

    @staticmethod
    def _up(level: int | None, steps: int) -> int | None:
        return None if level is None else level - steps

    @staticmethod
    def _down(level: int | None, part: str) -> int | None:
        for segment in part.split("/"):
            if level is None or level < 0:
                return level
            level += -1 if segment == os.pardir else 0 if segment in ("", os.curdir) else 1
        return level


def outward_references(source: str, depth: int) -> list[str]:
    """Where ``source`` (a file ``depth`` levels below the repository's root: ``tests/x.py``
    is 2) names a place outside the repository, as ``line N: text``."""
    tree = ast.parse(source)
    levels = _Levels(depth)
    assigns = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Assign)), key=lambda n: n.lineno
    )
    for assign in assigns:
        level = levels.of(assign.value)
        for target in assign.targets:
            if isinstance(target, ast.Name) and level is not None:
                levels.names[target.id] = level
    found: dict[int, str] = {}  # one per line: the outermost expression (walk is breadth-first)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if match := OUTWARD.search(node.value):
                text = node.value[max(0, match.start() - 20) : match.end() + 40]
                found.setdefault(node.lineno, repr(text))
        elif (
            isinstance(node, ast.expr)
            and not isinstance(node, ast.Name)
            and (level := levels.of(node)) is not None
            and level < 0
        ):
            found.setdefault(node.lineno, ast.unparse(node))
    return [f"line {n}: {text}" for n, text in sorted(found.items())]


def up(text: str) -> str:
    """``text`` with ``UP`` as the parent-folder segment (kept out of this file's literals)."""
    return text.replace("UP", os.pardir)


@pytest.mark.fast
@pytest.mark.parametrize(
    "source",
    [
        'REF = Path(__file__).parents[2] / "beside" / "reference"',
        'REF = Path(__file__).resolve().parent.parent.parent / "beside"',
        'REPO = Path(__file__).resolve().parents[1]\nX = REPO.parent / "beside/x.json"',
        'REPO = Path(__file__).resolve().parents[1]\nX = REPO / "tests/UP/UP/beside"',
        'X = os.path.join(os.path.dirname(__file__), "UP", "UP", "beside")',
        'X = open("UP/beside/x.json")',
        'X = "sha" "red/reference/terminal49/openapi.json"',
    ],
)
def test_the_static_check_finds_a_climb_out(source: str) -> None:
    assert outward_references(up(source), depth=2)


@pytest.mark.fast
@pytest.mark.parametrize(
    "source",
    [
        'REPO = Path(__file__).resolve().parents[1]\nX = REPO / "tests/fixtures" / "a.json"',
        'X = Path(__file__).parent.parent / "README.md"',
        'X = db.parent / "t.txt"',
        '"""The shared server: these run last."""',
    ],
)
def test_the_static_check_leaves_paths_inside_alone(source: str) -> None:
    assert outward_references(up(source), depth=2) == []


@pytest.mark.fast
def test_tests_and_benchmarks_stay_inside_the_repository() -> None:
    assert len(SOURCES) > 20
    found = {
        str(p.relative_to(REPO)): refs
        for p in SOURCES
        if (refs := outward_references(p.read_text(), len(p.relative_to(REPO).parts)))
    }
    assert found == {}


@pytest.mark.fast
def test_fixtures_are_files_of_the_repository() -> None:
    fixtures = REPO / "tests" / "fixtures"
    files = [p for p in fixtures.rglob("*") if not p.is_dir()]
    assert any(p.suffix == ".json" for p in files)
    assert [p for p in files if p.is_symlink()] == []


def _repo_with_our_conftest(tmp_path: Path) -> Path:
    """A repository at ``tmp_path / "repo"`` holding only a pytest.ini and this conftest."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "pytest.ini").write_text("[pytest]\n")
    shutil.copy(REPO / "tests" / "conftest.py", repo / "tests" / "conftest.py")
    return repo


def _pytest(
    repo: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """pytest over ``repo``'s tests, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "tests"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_read_beside_the_repository_fails_the_test_and_names_the_file(
    tmp_path: Path, workers: list[str]
) -> None:
    repo = _repo_with_our_conftest(tmp_path)
    (tmp_path / "beside").mkdir()
    (tmp_path / "beside" / "data.json").write_text("{}")
    (tmp_path / "beside" / "listed.json").write_text("{}")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "cache.json").write_text("{}")
    (repo / "tests" / "test_reads.py").write_text(
        "from pathlib import Path\n"
        "HERE = Path(__file__).resolve().parents[1]\n"
        "def test_inside():\n"
        "    assert (HERE / 'pytest.ini').read_text()\n"
        "    assert (HERE.parent / '.hidden' / 'cache.json').read_text() == '{}'\n"
        "def test_beside():\n"
        "    assert (HERE.parent / 'beside' / 'data.json').read_text() == '{}'\n"
        "def test_listed(tmp_path):\n"
        "    assert len(list((HERE.parent / 'beside').glob('l*.json'))) == 1\n"
    )
    res = _pytest(repo, f"--basetemp={tmp_path / 'inner-tmp'}", *workers)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    assert "FAILED tests/test_reads.py::test_beside - opened outside the repository" in out
    assert str(tmp_path / "beside" / "data.json") in out
    assert "FAILED tests/test_reads.py::test_listed" in out
    assert "cache.json" not in out


def test_a_clone_directly_in_the_temporary_folder_passes(tmp_path: Path) -> None:
    """CI may clone into /tmp itself: pytest's own temporary folders are then siblings of the
    repository, and reading them is not reading beside it."""
    repo = _repo_with_our_conftest(tmp_path)
    (tmp_path / "other-program.tmp").write_text("{}")
    # an earlier run's: pytest's temporary folders are there before the session starts
    (tmp_path / f"pytest-of-{getpass.getuser()}").mkdir()
    (repo / "tests" / "test_temp.py").write_text(
        "def test_uses_tmp_path(tmp_path):\n"
        "    (tmp_path / 'x').write_text('1')\n"
        "    assert (tmp_path / 'x').read_text() == '1'\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TMP", "TEMP")}
    env["TMPDIR"] = str(tmp_path)  # the clone sits directly in the temporary folder
    res = _pytest(repo, "-n", "0", env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "1 passed" in out and "opened outside the repository" not in out, out
