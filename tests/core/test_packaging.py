"""The import name is infermatrix; no top-level core/ or plugins/ package may be installed."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_every_src_package_is_listed_under_infermatrix():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"] == {"infermatrix": "src"}
    listed = set(cfg["packages"])
    found = {
        "infermatrix" + ("." + ".".join(p.parent.relative_to(ROOT / "src").parts) if p.parent != ROOT / "src" else "")
        for p in (ROOT / "src").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found == listed
    assert all(name == "infermatrix" or name.startswith("infermatrix.") for name in listed)


def test_installed_package_maps_to_src():
    import infermatrix.core

    assert Path(infermatrix.core.__file__).resolve().parent == (ROOT / "src" / "core").resolve()
