"""Which files ``fxls check`` looks at: gitignore rules (checked against git itself when it is
installed), virtual environments, hidden folders, excludes, globs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fxls.cli.check.discovery import discover, exclude_rules
from fxls.cli.check.gitignore import IgnoreStack, compile_rule

HAS_GIT = shutil.which("git") is not None


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "expected"),
    [
        ("*.py", "a/b/c.py", False, True),
        ("*.py", "c.pyc", False, False),
        ("/top.py", "top.py", False, True),
        ("/top.py", "sub/top.py", False, False),
        ("build/", "build", True, True),
        ("build/", "build", False, False),
        ("build/", "x/build", True, True),
        ("a/b", "a/b", False, True),
        ("a/b", "x/a/b", False, False),
        ("**/logs", "deep/er/logs", True, True),
        ("a/**/b", "a/b", False, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("data/**", "data/x/y.py", False, True),
        ("data/**", "data", True, False),
        ("file?.py", "file1.py", False, True),
        ("file?.py", "file10.py", False, False),
        ("[abc].py", "b.py", False, True),
        ("[!abc].py", "b.py", False, False),
        ("\\#hash.py", "#hash.py", False, True),
        ("trailing.py   ", "trailing.py", False, True),
    ],
)
def test_gitignore_patterns(pattern: str, path: str, is_dir: bool, expected: bool) -> None:
    rule = compile_rule(pattern)
    assert rule is not None
    matched = (not rule.dir_only or is_dir) and rule.matches(path)
    assert matched is expected


def test_comments_and_blank_lines_are_not_rules() -> None:
    assert compile_rule("# a comment") is None
    assert compile_rule("   ") is None
    assert compile_rule("!") is None


PROJECT = {
    "pyproject.toml": "[project]\nname = 'demo'\n",
    ".gitignore": "build/\n*.gen.py\n/scratch.py\nlogs/**\n!keep.gen.py\n",
    "model.py": "x = 1\n",
    "scratch.py": "x = 1\n",
    "keep.gen.py": "x = 1\n",
    "other.gen.py": "x = 1\n",
    "pkg/__init__.py": "",
    "pkg/scratch.py": "x = 1\n",
    "pkg/layers/blocks.py": "x = 1\n",
    "pkg/layers/.gitignore": "experimental_*.py\n!experimental_ok.py\n",
    "pkg/layers/experimental_a.py": "x = 1\n",
    "pkg/layers/experimental_ok.py": "x = 1\n",
    "pkg/__pycache__/blocks.cpython-311.py": "x = 1\n",
    "build/lib/model.py": "x = 1\n",
    "logs/run.py": "x = 1\n",
    "venv/pyvenv.cfg": "home = /usr\n",
    "venv/lib/site.py": "x = 1\n",
    "env2/conda-meta/history": "",
    "env2/lib/x.py": "x = 1\n",
    "node_modules/pkg/tool.py": "x = 1\n",
    ".hidden/secret.py": "x = 1\n",
    ".dotfile.py": "x = 1\n",
    "notes.txt": "not python\n",
}
EXPECTED = {
    "keep.gen.py",
    "model.py",
    "pkg/__init__.py",
    "pkg/scratch.py",
    "pkg/layers/blocks.py",
    "pkg/layers/experimental_ok.py",
}


def _found(root: Path, *args: str, **kwargs: object) -> set[str]:
    result = discover([str(root / a) if a != "." else str(root) for a in args], **kwargs)  # type: ignore[arg-type]
    assert not result.errors
    return {Path(t.path).relative_to(root).as_posix() for t in result.targets}


def test_directory_walk_skips_ignored_environments_and_hidden(tmp_path: Path) -> None:
    _tree(tmp_path, PROJECT)
    assert _found(tmp_path, ".") == EXPECTED


def test_ignore_rules_without_a_git_repository_use_the_folders_own_gitignore(
    tmp_path: Path,
) -> None:
    _tree(tmp_path, PROJECT)
    assert not (tmp_path / ".git").exists()
    assert _found(tmp_path, "pkg") == {p for p in EXPECTED if p.startswith("pkg/")}


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_ignore_rules_agree_with_git(tmp_path: Path) -> None:
    _tree(tmp_path, PROJECT)
    (tmp_path / "venv" / "pyvenv.cfg").unlink()  # git knows nothing of environments
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".git" / "info").mkdir(exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("pkg/scratch.py\n")
    candidates = [
        p.relative_to(tmp_path).as_posix()
        for p in tmp_path.rglob("*")
        if p.is_file() and ".git" not in p.parts
    ]
    proc = subprocess.run(
        ["git", "-C", str(tmp_path), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(candidates),
        capture_output=True,
        text=True,
    )
    by_git = set(proc.stdout.split())
    # walking from a subfolder still sees the rules of the repository root and .git/info/exclude
    stack_root = IgnoreStack.for_directory(str(tmp_path))
    ours = set()
    for rel in candidates:
        path = tmp_path / rel
        stack = stack_root
        ignored = False
        for parent in list(path.relative_to(tmp_path).parents)[::-1][1:]:
            folder = tmp_path / parent
            if stack.ignored(str(folder), True):
                ignored = True
                break
            stack = stack.enter(str(folder))
        if ignored or stack.ignored(str(path), False):
            ours.add(rel)
    assert ours == by_git
    found = _found(tmp_path, "pkg")
    assert "pkg/scratch.py" not in found and "pkg/layers/blocks.py" in found


def test_explicit_files_are_checked_even_when_ignored(tmp_path: Path) -> None:
    _tree(tmp_path, PROJECT)
    result = discover([str(tmp_path / "scratch.py"), str(tmp_path / "notes.txt")])
    assert [t.explicit for t in result.targets] == [True, True]


def test_excludes_are_gitignore_patterns_relative_to_their_base(tmp_path: Path) -> None:
    _tree(tmp_path, PROJECT)
    rules = exclude_rules(["pkg/layers/", "/model.py"], str(tmp_path))
    assert _found(tmp_path, ".", excludes=rules) == {
        "keep.gen.py",
        "pkg/__init__.py",
        "pkg/scratch.py",
    }


def test_globs_are_expanded_and_filtered(tmp_path: Path) -> None:
    _tree(tmp_path, PROJECT)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = discover(["**/*.py"])
        found = {t.path for t in result.targets}
        assert found == EXPECTED
        assert all(not t.explicit for t in result.targets)
        missing = discover(["nothing/**/*.py"])
        assert missing.errors == ["no files match nothing/**/*.py"]
    finally:
        os.chdir(cwd)


def test_each_file_once_in_a_stable_order(tmp_path: Path) -> None:
    _tree(tmp_path, PROJECT)
    result = discover([str(tmp_path / "pkg"), str(tmp_path), str(tmp_path / "model.py")])
    paths = [Path(t.path).relative_to(tmp_path).as_posix() for t in result.targets]
    assert len(paths) == len(set(paths))
    assert paths[:3] == ["pkg/__init__.py", "pkg/scratch.py", "pkg/layers/blocks.py"]


def test_links_to_files_inside_the_folder_are_read_through_links_out_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project that links a shared module into a second place gets it checked; a link out of
    the folder walked, or into a hidden folder of it (``.git/``), is left out with a note; a link to a device stays a target, so that
    reading it says why it is not checked (``read_source`` refuses it)."""
    from fxls.cli.check.run import read_worklist

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    _tree(project, {"shared/common.py": "X = 1\n", "model.py": "Y = 2\n"})
    _tree(elsewhere, {"secret.py": "Z = 3\n"})
    (project / "linked.py").symlink_to(project / "shared" / "common.py")
    (project / "out.py").symlink_to(elsewhere / "secret.py")
    (project / "zero.py").symlink_to("/dev/zero")
    _tree(project, {".git/config": "[remote]\n"})
    (project / "git.py").symlink_to(project / ".git" / "config")
    monkeypatch.chdir(tmp_path)
    for args in (["project"], ["project/*.py"]):
        found = discover(args)
        by_name = {os.path.basename(t.path): t for t in found.targets}
        assert set(by_name) >= {"linked.py", "model.py", "zero.py"}, args
        assert "out.py" not in by_name and "git.py" not in by_name, args
        assert any("git.py" in note and "hidden" in note for note in found.notes), found.notes
        assert by_name["linked.py"].follow_link and not by_name["zero.py"].follow_link
        assert any("out.py" in note and "outside" in note for note in found.notes), found.notes
        errors: list[str] = []
        worklist = read_worklist(found.targets, None, [], None, errors)
        assert {os.path.basename(p.path) for p in worklist} >= {"linked.py", "model.py"}
        assert len(errors) == 1 and "zero.py" in errors[0] and "not a regular file" in errors[0]
