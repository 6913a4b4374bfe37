"""Moving results in and out of a database: ``import`` (a published page's text, or a Parquet
export) and ``export --parquet``."""

from __future__ import annotations

from pathlib import Path

import click

from infermatrix.cli.common import DEFAULT_DB, fail, open_store, out_console


@click.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--name", default=None, help="name of the imported run (a page: default the file name)")
@click.option("--replace", is_flag=True, help="overwrite runs that are already in the database")
def import_cmd(path: Path, db: str, name: str | None, replace: bool) -> None:
    """Import results: a DIRECTORY written by `export --parquet` (merges its runs), or the text of
    a published benchmark page (stored as a run with status `imported`, to compare against)."""
    from infermatrix.core.importer import PageError, import_page
    from infermatrix.core.store import StoreError
    from infermatrix.core.store.parquet import import_runs

    if not path.exists():
        fail(f"{path}: no such file or directory")
    store = open_store(db)
    console = out_console(highlight=False)
    try:
        if path.is_dir():
            if name:
                fail("--name applies to a published page, not to a Parquet export")
            results = import_runs(store, path, replace=replace)
            for r in results:
                console.print(f"{r.action} run {r.run_id}" + (f" ({r.why})" if r.why else ""))
            console.print(f"{len(results)} run(s) in {path} · database: {store.path}")
            return
        result = import_page(store, path, name=name, replace=replace)
        page = result.page
        if not result.created:
            console.print(f"{path.name} is already imported as run {result.run_id} (use --replace to import it again)")
            return
        valid = sum(1 for r in page.decode if r.status == "valid")
        console.print(
            f"imported run {result.run_id}: {page.engine or 'unknown engine'} {page.engine_version or ''}".rstrip()
            + f" · {len(page.prefill)} prefill points · {len(page.decode)} decode cells ({valid} valid)"
        )
        console.print(f"database: {store.path} · compare with: infermatrix compare {result.run_id} YOUR_RUN --db {db}")
    except PageError as exc:
        fail(f"{path}: {exc}")
    except StoreError as exc:
        fail(str(exc))
    finally:
        store.close()


@click.command("export")
@click.argument("run_ids", nargs=-1)
@click.option("--db", default=DEFAULT_DB, show_default=True)
@click.option("--parquet", "directory", required=True, type=click.Path(path_type=Path),
              help="write the runs as Parquet files (one per table) and a manifest into this directory")
@click.option("--all", "all_runs", is_flag=True, help="export every run in the database")
@click.option("--force", is_flag=True, help="overwrite an earlier export in the directory")
def export_cmd(run_ids: tuple[str, ...], db: str, directory: Path, all_runs: bool, force: bool) -> None:
    """Export runs (ids or unique prefixes; the latest when none is given) for `import` elsewhere."""
    from infermatrix.core.store import StoreError
    from infermatrix.core.store.parquet import export_runs

    store = open_store(db, read_only=True)
    try:
        if all_runs and run_ids:
            fail("give run ids or --all, not both")
        ids = [r["run_id"] for r in store.list_runs()] if all_runs else list(run_ids) or [store.resolve_run(None)]
        manifest = export_runs(store, ids, directory, force=force)
        rows = manifest["rows"]
        out_console(highlight=False).print(
            f"exported {len(manifest['runs'])} run(s) ({', '.join(manifest['runs'])}) to {directory}: "
            f"{rows['cells']} cells, {rows['prefill']} prefill points, {rows['requests']} requests"
        )
    except StoreError as exc:
        fail(str(exc))
    finally:
        store.close()


COMMANDS = [import_cmd, export_cmd]
