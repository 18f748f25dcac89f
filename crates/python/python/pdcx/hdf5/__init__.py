"""HDF5 import and export (copy mode), through h5py (the HDF5 library itself).

``pdcx import FILE.h5`` copies every dataset of a file into pdcx; ``pdcx export OBJ... -o
FILE.h5`` writes objects as datasets of a new HDF5 file. Both commands run this module
(``python3 -m pdcx.hdf5 import|export ...``); from Python use :func:`import_file` and
:func:`export_objects`. The mapping (also printed by ``--help``):

- one HDF5 file -> one container (named after the file's stem, or ``--container``);
- one dataset -> one object named ``CONTAINER/GROUP/PATH/DATASET`` (the dataset's path inside
  the file, without the leading ``/``, after the container's name: object names are unique
  across the whole deployment, so the container's name keeps two files' ``/x`` apart);
- numeric datasets keep their dtype (int8..int64, uint8..uint64, float32, float64; big-endian
  data is stored little-endian and the tag ``hdf5_dtype`` remembers the file's order); booleans
  become uint8, enums their base integer type (tags ``hdf5_dtype``, ``hdf5_enum``); compound
  datasets (and complex numbers, which HDF5 stores as compounds) become composite objects;
  fixed-length strings a ``bytes`` object with one extra trailing dim of the string length;
- a scalar dataset becomes a 1-element object (tag ``hdf5_shape=scalar``), a dataset with a
  null dataspace a 0-element object (``hdf5_shape=null``); zero-length dims are kept;
- dataset attributes -> object tags, group attributes -> container tags (root attributes under
  their own name, others as ``/GROUP/PATH@ATTR``); strings and numbers stay strings and numbers,
  arrays become JSON text (``"[1.0, 2.5]"``); ``hdf5_attr_types`` (JSON) keeps each attribute's
  exact dtype and shape so an export writes the same attribute back;
- bookkeeping tags: ``hdf5_path`` (the dataset's full path), ``hdf5_file`` (absolute path of
  the file), ``hdf5_chunks`` and ``hdf5_filters`` (its chunk shape and filters); the container
  gets ``hdf5_file`` and ``hdf5_import`` (``incomplete`` while copying, then ``complete``).

Data moves chunk by chunk: each HDF5 chunk is read through h5py (which applies the file's
filters: gzip, shuffle, and ZFP, LZ4, Blosc, Zstd, ... when the ``hdf5plugin`` package is
installed) and written as its own region of the object, many chunks per message. Contiguous
datasets move in slabs of bounded size. Under ``mpirun`` with mpi4py, rank 0 creates the
container and objects and every rank copies a round-robin share of the chunks.

The package is split by job: ``_mapping`` (what maps to what), ``_copy`` (moving data),
``_import``, ``_export`` and ``_cli`` (the command line); imports point that way round
(_cli -> _import, _export -> _copy -> _mapping).
"""

from __future__ import annotations

from ._cli import main
from ._export import ExportReport, export_objects
from ._import import HDF5ImportError, ImportReport, import_file
from ._import import promote as promote

__all__ = ["ExportReport", "HDF5ImportError", "ImportReport", "export_objects", "import_file", "main"]
