//! The exception classes of `pdcx._native` (one per error kind, under `PdcxError`) and the
//! mapping of the client's typed errors onto them.

use pdcx_core::ErrorKind;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

pyo3::create_exception!(_native, PdcxError, PyException);
pyo3::create_exception!(_native, NotFoundError, PdcxError);
pyo3::create_exception!(_native, AlreadyExistsError, PdcxError);
pyo3::create_exception!(_native, InvalidArgumentError, PdcxError);
pyo3::create_exception!(_native, OutOfBoundsError, InvalidArgumentError);
pyo3::create_exception!(_native, DtypeMismatchError, InvalidArgumentError);
pyo3::create_exception!(_native, UnavailableError, PdcxError);
pyo3::create_exception!(_native, AuthError, PdcxError);
pyo3::create_exception!(_native, NoSpaceError, PdcxError);
pyo3::create_exception!(_native, ProtocolError, PdcxError);

pub(crate) fn to_py(e: pdcx_core::Error) -> PyErr {
    let m = e.message;
    match e.kind {
        ErrorKind::NotFound => NotFoundError::new_err(m),
        ErrorKind::AlreadyExists => AlreadyExistsError::new_err(m),
        ErrorKind::InvalidArgument => InvalidArgumentError::new_err(m),
        ErrorKind::OutOfBounds => OutOfBoundsError::new_err(m),
        ErrorKind::DtypeMismatch => DtypeMismatchError::new_err(m),
        ErrorKind::Unavailable => UnavailableError::new_err(m),
        ErrorKind::Auth => AuthError::new_err(m),
        ErrorKind::NoSpace => NoSpaceError::new_err(m),
        ErrorKind::Protocol => ProtocolError::new_err(m),
        ErrorKind::Io | ErrorKind::Internal => PdcxError::new_err(m),
    }
}

pub(crate) type R<T> = PyResult<T>;
