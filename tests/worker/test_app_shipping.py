"""What a worker ships to a cluster's executors, and its checks of ``--app``,
``--py-files`` and ``--conf`` before Spark starts (no Spark here: the end-to-end checks
on a real cluster are in ``test_cluster``)."""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.runtime.app import AppError, is_local_master, load_app, py_files, shipment
from worker.runtime.spark import parse_conf


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with a module and a package of the user's, the current directory."""
    (tmp_path / "single_app.py").write_text("def f(df, ctx):\n    pass\nX = 1\n")
    package = tmp_path / "shippable_pkg"
    (package / "sub" / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "job.py").write_text("def g(ctx, rows):\n    return rows\n")
    (package / "sub" / "__pycache__" / "job.cpython-311.pyc").write_bytes(b"stale")
    (package / "data.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    saved = list(sys.path)
    yield tmp_path
    sys.path[:] = saved
    for name in [m for m in sys.modules if m.startswith(("single_app", "shippable_pkg"))]:
        del sys.modules[name]


@pytest.mark.parametrize(("master", "local"), [
    ("local", True), ("local[2]", True), ("local[*]", True), ("local[4,3]", True),
    ("spark://127.0.0.1:7077", False), ("k8s://https://api:6443", False), ("yarn", False),
    ("local-cluster[2,1,1024]", False)])
def test_local_masters_are_told_from_cluster_ones(master: str, local: bool) -> None:
    assert is_local_master(master) is local


def test_conf_takes_key_value_items_and_refuses_what_coxswain_sets_itself() -> None:
    assert parse_conf(["spark.executor.memory=2g", "spark.x=a=b", "spark.empty="]) == {
        "spark.executor.memory": "2g", "spark.x": "a=b", "spark.empty": ""}
    for bad, reason in [("spark.executor.memory", "KEY=VALUE"), ("=2g", "KEY=VALUE"),
                        ("spark executor=1", "KEY=VALUE"),
                        ("spark.master=local[2]", "--spark-master"),
                        ("spark.pyspark.python=/usr/bin/python3", "--executor-python")]:
        with pytest.raises(ValueError, match=reason.replace("[", r"\[")):
            parse_conf([bad])


def test_py_files_must_exist_and_be_what_spark_ships(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.zip").write_bytes(b"")
    (tmp_path / "c.txt").write_text("")
    assert py_files([f"{tmp_path}/a.py,{tmp_path}/b.zip", ""]) == [
        tmp_path / "a.py", tmp_path / "b.zip"]
    with pytest.raises(AppError, match="not a file"):
        py_files([str(tmp_path / "missing.py")])
    with pytest.raises(AppError, match=r"\.py, \.zip or \.egg"):
        py_files([str(tmp_path / "c.txt")])


def test_the_app_is_imported_from_the_current_directory_with_clear_errors(
    app_dir: Path
) -> None:
    module, function = load_app("single_app:f")
    assert module == "single_app" and callable(function)
    assert str(app_dir) == sys.path[-1]  # after the installed packages: never shadows them
    with pytest.raises(AppError, match="has no function nope"):
        load_app("single_app:nope")
    with pytest.raises(AppError, match="has no function X"):
        load_app("single_app:X")  # not callable
    with pytest.raises(AppError, match="importing no_such_app failed on the driver"):
        load_app("no_such_app:f")
    with pytest.raises(AppError, match="module:function"):
        load_app("single_app")


def test_a_cluster_gets_the_apps_module_or_its_whole_package_and_the_py_files(
    app_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("ship")
    extra = app_dir / "extra.py"
    extra.write_text("")
    load_app("single_app:f")
    assert shipment("single_app", [extra], out, "spark://h:7077").files == (
        app_dir / "single_app.py", extra)
    load_app("shippable_pkg.sub.job:g")
    shipped = shipment("shippable_pkg.sub.job", [], out, "spark://h:7077").files
    assert shipped == (out / "shippable_pkg.zip",)
    with zipfile.ZipFile(shipped[0]) as archive:  # the package as its top-level folder
        assert sorted(archive.namelist()) == [
            "shippable_pkg/__init__.py", "shippable_pkg/data.json",
            "shippable_pkg/sub/__init__.py", "shippable_pkg/sub/job.py"]
    assert not list(out.glob("*.part"))
    # the app's file named in --py-files too: shipped once
    assert shipment("single_app", [app_dir / "single_app.py", extra], out,
                    "spark://h:7077").files == (app_dir / "single_app.py", extra)
    # a local master's Python workers start where the driver runs: only --py-files ship
    assert shipment("single_app", [extra], out, "local[2]").files == (extra,)
    # installed distributions are installed on every executor host, never shipped
    assert shipment("worker.demo_app", [], out, "spark://h:7077").files == ()
    assert shipment("json", [], out, "spark://h:7077").files == ()
