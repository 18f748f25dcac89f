"""The command line of ``pdcx import`` and ``pdcx export`` (``python3 -m pdcx.hdf5
import|export ...``): arguments, help text with the mapping, and the summary on stderr."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from .. import Client, InvalidArgumentError, NotFoundError, PdcxError, connect
from ._export import export_objects
from ._import import _mpi_comm, _open_h5, import_file, undo_import
from ._mapping import DEFAULT_MEMORY, MiB, _need_h5py, _plan_dataset, _Unsupported, _walk

IMPORT_HELP = """\
Copies every dataset of each HDF5 FILE into pdcx: one container per file, one object per dataset.

what maps to what:
  file run.h5                    container "run" (the file's stem; --container NAME)
  dataset /fields/E/x            object "run/fields/E/x" (container name + the dataset's path),
                                 any rank up to 8, same dtype (int8..int64, uint8..uint64,
                                 float32, float64; bool -> uint8, enum -> its integer type)
  compound / complex dataset     composite object (obj.records[...], obj.field("x")[...])
  fixed-length string dataset    bytes object with one more trailing dim (the string length)
  scalar dataset / null space    1-element object (tag hdf5_shape=scalar) / 0-element (=null)
  dataset attribute units="m/s"  object tag units="m/s"; numbers stay numbers, arrays become
                                 JSON text "[1.0, 2.0]" (tag hdf5_attr_types keeps the exact types)
  group attribute on /fields     container tag "/fields@NAME" (root group attributes: "NAME")
  chunks                         each chunk is read (gzip, shuffle, ZFP, ... decoded by HDF5) and
                                 written as one region of the object
  bookkeeping tags               hdf5_path=/fields/E/x, hdf5_file=/abs/run.h5, hdf5_chunks,
                                 hdf5_filters; container tag hdf5_import=complete when done

Nothing is created when the file cannot be read, a dataset has a dtype pdcx lacks (variable-
length strings, float16, references, ...; --skip-unsupported skips them with a warning) or the
container exists (--into-existing adds to it). Under `mpirun -n N` (with mpi4py) rank 0 creates
the objects and all ranks copy a round-robin share of the chunks.

An import stopped part-way (Ctrl-C, a killed job) leaves its container tagged
hdf5_import=incomplete, and a plain rerun is refused: --resume finishes it (the objects already
made are kept, their data copied again), --undo removes what it made (as does
`pdcx rm -r CONTAINER` for a container of its own). Ctrl-C prints one line and exits 130.

examples:
  pdcx import run.h5                               # container "run"
  pdcx import run.h5 --container run7 --quiet
  pdcx import a.h5 b.h5 c.h5 --skip-unsupported    # containers a, b, c
  mpirun -n 8 pdcx import big.h5                   # 8 ranks copy in parallel
  pdcx import run.h5 --dry-run                     # print the mapping, create nothing
  pdcx import run.h5 --resume                      # finish an interrupted import
  pdcx import run.h5 --undo                        # remove what importing run.h5 made
"""

EXPORT_HELP = """\
Writes pdcx objects as datasets of a new HDF5 file that h5py, h5dump and every HDF5 program read.

what maps to what:
  object "run/fields/E/x"        dataset at its hdf5_path tag when an import made it (so
                                 import -> export gives back the same paths), else at
                                 "/run/fields/E/x" (the object's name as a path)
  object tags                    dataset attributes (pdcx.* and hdf5_* bookkeeping tags are not
                                 written; imported attributes get their original type back)
  composite object               compound dataset
  container tags of an import    group attributes ("/fields@units" -> attribute units of /fields)
  chunks                         the imported dataset's chunk shape (hdf5_chunks), else h5py's
                                 choice; --compression gzip compresses them

The file is written as FILE.partial and renamed when complete.

examples:
  pdcx export run/fields/E/x run/fields/E/y -o fields.h5
  pdcx export --container run -o run-copy.h5 --compression gzip
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pdcx",
        description="HDF5 import and export for pdcx (copy mode).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{import,export}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", help="deployment root directory (default: $PDCX_ROOT)")
    common.add_argument("--quiet", "-q", action="store_true", help="no progress or summary on stderr")
    common.add_argument(
        "--memory",
        type=int,
        default=DEFAULT_MEMORY // MiB,
        metavar="MiB",
        help="bound on the data held in memory per process (default %(default)s MiB)",
    )
    imp = sub.add_parser(
        "import",
        parents=[common],
        help="copy HDF5 files into pdcx",
        description=IMPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("files", nargs="+", metavar="FILE.h5")
    imp.add_argument("--container", "-c", help="container name (one file only; default: the file's stem)")
    imp.add_argument("--into-existing", action="store_true", help="add the objects to an existing container")
    imp.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="skip datasets pdcx cannot hold (with a warning) instead of refusing the file",
    )
    imp.add_argument(
        "--durability",
        choices=["memory", "local", "remote"],
        default="local",
        help="what each written batch waits for (default %(default)s: fsynced in the server's log)",
    )
    imp.add_argument(
        "--by-reference",
        action="store_true",
        help="do not copy the data: each chunk's bytes stay in the file, read on access by the "
        "servers (which must reach the file at its absolute path; it must not change). "
        "Datasets with filters other than shuffle/deflate are copied",
    )
    imp.add_argument("--dry-run", action="store_true", help="print what would be created and exit")
    again = imp.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="finish an import that was interrupted (its container is tagged hdf5_import=incomplete)",
    )
    again.add_argument(
        "--undo",
        action="store_true",
        help="remove the objects importing FILE made (finished or not), and its container if left empty",
    )
    exp = sub.add_parser(
        "export",
        parents=[common],
        help="write pdcx objects to an HDF5 file",
        description=EXPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    exp.add_argument("objects", nargs="*", metavar="OBJ", help="object names")
    exp.add_argument("-o", "--output", required=True, metavar="FILE.h5")
    exp.add_argument(
        "--container", "-c", action="append", default=[], help="also export every object of this container"
    )
    exp.add_argument("--overwrite", action="store_true", help="replace FILE.h5 if it exists")
    exp.add_argument("--compression", choices=["gzip", "lzf"], help="compress the datasets' chunks")
    exp.add_argument("--compression-opts", type=int, metavar="LEVEL", help="gzip level 0-9 (default 4)")
    return p


def _connect(root: str | None) -> Client:
    if root is None and not os.environ.get("PDCX_ROOT"):
        raise InvalidArgumentError(
            "no deployment: pass --root DIR or set PDCX_ROOT (start servers with pdcx server start --root DIR)"
        )
    return connect(root)


def _say(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _cmd_import(a) -> int:
    _need_h5py()
    if a.container and len(a.files) > 1:
        raise InvalidArgumentError("--container names one container: give it with one file only")
    if a.dry_run:
        if int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))) != 0:
            return 0  # under mpirun: one listing
        for path in a.files:
            name = a.container or os.path.splitext(os.path.basename(path))[0]
            with _open_h5(path) as f:
                dsets, _ = _walk(f)
                print(f"{path} -> container {name!r}")
                for d in dsets:
                    try:
                        p, _ = _plan_dataset(d, name, os.path.abspath(path))
                        dt = p.dtype if p.kind == "array" else f"{p.kind} {p.dtype}"
                        print(f"  {d.name} -> {p.name}  shape={list(p.shape)} {dt}  {p.nbytes / MiB:.1f} MiB")
                    except _Unsupported as e:
                        print(f"  {d.name} -> UNSUPPORTED: {e}")
        return 0
    # Every file opens and names its own container before the first one is imported.
    stems: dict[str, str] = {}
    for path in a.files:
        if not a.undo:  # undoing needs no file: it may be gone already
            _open_h5(path).close()
        name = a.container or os.path.splitext(os.path.basename(path))[0]
        if name in stems:
            raise InvalidArgumentError(f"{stems[name]} and {path} would both become container {name!r}")
        stems[name] = path
    if a.undo:
        return _undo(a, stems)
    comm = _mpi_comm(None)
    rank = 0 if comm is None else comm.Get_rank()
    env_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    if comm is None and env_size > 1:
        # Started by mpirun but mpi4py is missing: one rank imports, the others would clash.
        my_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
        if my_rank != 0:
            return 0
        _say(a.quiet, "pdcx import: mpi4py is not installed: rank 0 imports alone (pip install mpi4py)")
    client = _connect(a.root)
    quiet = a.quiet or rank != 0
    for name, path in stems.items():
        try:
            r = import_file(
                client,
                path,
                a.container,
                into_existing=a.into_existing,
                skip_unsupported=a.skip_unsupported,
                memory=a.memory * MiB,
                durability=a.durability,
                progress=not a.quiet,
                comm=comm,
                by_reference=a.by_reference,
                resume=a.resume,
            )
        except KeyboardInterrupt:
            raise _Interrupted(_left_behind(client, name, path)) from None
        for w in r.warnings:
            _say(quiet, f"warning: {w}")
        for s in r.skipped:
            _say(quiet, f"warning: skipped {s}")
        for c in r.copied_instead:
            _say(quiet, f"note: copied instead of referenced: {c}")
        if r.referenced:
            _say(
                quiet,
                f"referenced {len(r.referenced)} dataset(s) of {path} ({r.referenced_bytes / MiB:,.1f} MiB stay in the file)",
            )
        ranks = "" if comm is None else f" over {comm.Get_size()} ranks"
        _say(
            quiet,
            f"imported {len(r.objects)} dataset(s) of {path} into container {r.container!r}: "
            f"{r.bytes / MiB:,.1f} MiB in {r.seconds:.2f} s ({r.rate:,.0f} MB/s){ranks}",
        )
    client.close()
    return 0


class _Interrupted(Exception):
    """Ctrl-C during an import, with what it left (one line for the user)."""


def _left_behind(client: Client, name: str, path: str) -> str:
    """What an interrupted import of ``path`` into container ``name`` left, and what to do."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    try:
        state = client.open_container(name).tags.get("hdf5_import")
    except NotFoundError:
        return f"interrupted while importing {path}: nothing was created"
    except PdcxError as e:
        return f"interrupted while importing {path}; container {name!r} may hold part of it ({e})"
    if state == "complete":
        return f"interrupted after importing {path} into container {name!r} (complete)"
    again = shlex.quote(path)
    return (
        f"interrupted: container {name!r} holds part of {path} (tagged hdf5_import=incomplete): "
        f"`pdcx import --resume {again}` finishes it, `pdcx import --undo {again}` removes it"
    )


def _undo(a, stems: dict[str, str]) -> int:
    client = _connect(a.root)
    for name, path in stems.items():
        removed, gone = undo_import(client, path, name)
        _say(
            a.quiet,
            f"removed {removed} object(s) imported from {path}"
            + (f" and container {name!r}" if gone else f"; container {name!r} holds other objects and stays"),
        )
    client.close()
    return 0


def _cmd_export(a) -> int:
    client = _connect(a.root)
    names = list(a.objects)
    for c in a.container:
        client.open_container(c)  # NotFoundError names it
        names += [o.name for o in client.objects(c) if o.name not in names]
    opts = a.compression_opts if a.compression == "gzip" else None
    r = export_objects(
        client,
        names,
        a.output,
        overwrite=a.overwrite,
        compression=a.compression,
        compression_opts=opts,
        memory=a.memory * MiB,
        progress=not a.quiet,
    )
    _say(
        a.quiet,
        f"exported {len(r.datasets)} object(s) to {a.output}: {r.bytes / MiB:,.1f} MiB in {r.seconds:.2f} s "
        f"({r.rate:,.0f} MB/s)",
    )
    client.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.memory < 1:
        print("pdcx: --memory must be at least 1 MiB", file=sys.stderr)
        return 2
    # A job scheduler's SIGTERM ends the import as Ctrl-C does: one line on what is left.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _cmd_import(a) if a.command == "import" else _cmd_export(a)
    except _Interrupted as e:
        print(f"pdcx {a.command}: {e}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"pdcx {a.command}: interrupted", file=sys.stderr)
        return 130
    except (PdcxError, OSError) as e:
        if not getattr(e, "shared", False):  # under mpirun, an error all ranks share is said once
            print(f"pdcx {a.command}: error: {e}", file=sys.stderr)
        return 1
