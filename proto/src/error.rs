//! The ways a statement fails that callers decide on. Code anywhere in
//! icemerge reports a failure as one of these kinds, with the message the
//! user reads; it travels inside DataFusion's error (as
//! `DataFusionError::External`) through plans, tasks and joins, and at the
//! edges it is found again by [`IcemergeError::find`] — the CLI's exit
//! status, Flight SQL's status codes, a retry on conflict — never by
//! matching message text.

use std::error::Error as StdError;

use datafusion::error::DataFusionError;

/// A failure of a given kind; its `Display` is the user's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IcemergeError {
    /// Bad input: SQL, names, types, values, settings. Nothing changed.
    #[error("{0}")]
    InvalidInput(String),
    /// A table, namespace, column, snapshot or file that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A table or namespace that already exists.
    #[error("{0}")]
    AlreadyExists(String),
    /// Another writer changed the table first; nothing was committed.
    #[error("{0}")]
    Conflict(String),
    /// The statement was cancelled (Ctrl-C, a client going away, a lost
    /// executor); nothing was committed.
    #[error("{0}")]
    Cancelled(String),
    /// Valid, but not something icemerge does (yet).
    #[error("{0}")]
    Unsupported(String),
    /// The statement needs more memory than its budget (`--memory-limit`);
    /// nothing was committed.
    #[error("{0}")]
    OutOfMemory(String),
    /// Storage or catalog I/O failed.
    #[error("{0}")]
    Io(String),
    /// A broken invariant inside icemerge.
    #[error("{0}")]
    Internal(String),
}

/// What kind of failure an [`IcemergeError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidInput,
    NotFound,
    AlreadyExists,
    Conflict,
    Cancelled,
    Unsupported,
    OutOfMemory,
    Io,
    Internal,
}

impl IcemergeError {
    /// This error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            IcemergeError::InvalidInput(_) => ErrorKind::InvalidInput,
            IcemergeError::NotFound(_) => ErrorKind::NotFound,
            IcemergeError::AlreadyExists(_) => ErrorKind::AlreadyExists,
            IcemergeError::Conflict(_) => ErrorKind::Conflict,
            IcemergeError::Cancelled(_) => ErrorKind::Cancelled,
            IcemergeError::Unsupported(_) => ErrorKind::Unsupported,
            IcemergeError::OutOfMemory(_) => ErrorKind::OutOfMemory,
            IcemergeError::Io(_) => ErrorKind::Io,
            IcemergeError::Internal(_) => ErrorKind::Internal,
        }
    }

    /// The icemerge error inside `error`, however deeply DataFusion, Arrow
    /// or a join wrapped it.
    pub fn find(error: &DataFusionError) -> Option<&IcemergeError> {
        match error {
            DataFusionError::External(inner) => find_in(inner.as_ref()),
            DataFusionError::Context(_, inner) => Self::find(inner),
            DataFusionError::Shared(inner) => Self::find(inner),
            DataFusionError::ArrowError(inner, _) => find_in(inner.as_ref()),
            DataFusionError::Collection(errors) => errors.iter().find_map(Self::find),
            _ => None,
        }
    }

    /// The kind of the icemerge error inside `error`, if any.
    pub fn kind_of(error: &DataFusionError) -> Option<ErrorKind> {
        Self::find(error).map(IcemergeError::kind)
    }
}

fn find_in<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a IcemergeError> {
    if let Some(found) = error.downcast_ref::<IcemergeError>() {
        return Some(found);
    }
    if let Some(inner) = error.downcast_ref::<DataFusionError>() {
        return IcemergeError::find(inner);
    }
    if let Some(arrow::error::ArrowError::ExternalError(inner)) =
        error.downcast_ref::<arrow::error::ArrowError>()
    {
        return find_in(inner.as_ref());
    }
    error.source().and_then(find_in)
}

impl From<IcemergeError> for DataFusionError {
    fn from(error: IcemergeError) -> Self {
        DataFusionError::External(Box::new(error))
    }
}

/// Bad input, as the DataFusion error it travels in.
pub fn invalid_input(message: impl Into<String>) -> DataFusionError {
    IcemergeError::InvalidInput(message.into()).into()
}

/// Something that does not exist, as the DataFusion error it travels in.
pub fn not_found(message: impl Into<String>) -> DataFusionError {
    IcemergeError::NotFound(message.into()).into()
}

/// Something that already exists, as the DataFusion error it travels in.
pub fn already_exists(message: impl Into<String>) -> DataFusionError {
    IcemergeError::AlreadyExists(message.into()).into()
}

/// A concurrent change, as the DataFusion error it travels in.
pub fn conflict(message: impl Into<String>) -> DataFusionError {
    IcemergeError::Conflict(message.into()).into()
}

/// A cancelled statement, as the DataFusion error it travels in.
pub fn cancelled(message: impl Into<String>) -> DataFusionError {
    IcemergeError::Cancelled(message.into()).into()
}

/// A statement over its memory budget, as the DataFusion error it travels
/// in.
pub fn out_of_memory(message: impl Into<String>) -> DataFusionError {
    IcemergeError::OutOfMemory(message.into()).into()
}

/// Something icemerge does not do, as the DataFusion error it travels in.
pub fn unsupported(message: impl Into<String>) -> DataFusionError {
    IcemergeError::Unsupported(message.into()).into()
}

/// Failed storage or catalog I/O, as the DataFusion error it travels in.
pub fn io_error(message: impl Into<String>) -> DataFusionError {
    IcemergeError::Io(message.into()).into()
}

/// A broken invariant, as the DataFusion error it travels in.
pub fn internal(message: impl Into<String>) -> DataFusionError {
    IcemergeError::Internal(message.into()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_through_wrappers() {
        let conflict: DataFusionError = IcemergeError::Conflict("concurrent commit".into()).into();
        assert_eq!(IcemergeError::kind_of(&conflict), Some(ErrorKind::Conflict));
        let wrapped = DataFusionError::Context("commit".into(), Box::new(conflict));
        let shared = DataFusionError::Shared(std::sync::Arc::new(wrapped));
        assert_eq!(IcemergeError::kind_of(&shared), Some(ErrorKind::Conflict));
        let arrow = DataFusionError::ArrowError(
            Box::new(arrow::error::ArrowError::ExternalError(Box::new(
                DataFusionError::from(IcemergeError::Cancelled("cancelled".into())),
            ))),
            None,
        );
        assert_eq!(IcemergeError::kind_of(&arrow), Some(ErrorKind::Cancelled));
        assert_eq!(
            IcemergeError::kind_of(&DataFusionError::Plan("x".into())),
            None
        );
    }

    #[test]
    fn message_is_the_users() {
        let e: DataFusionError =
            IcemergeError::NotFound("table 'db.t' does not exist".into()).into();
        assert!(
            e.to_string().ends_with("table 'db.t' does not exist"),
            "{e}"
        );
    }
}
