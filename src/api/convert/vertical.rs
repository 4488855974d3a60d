//! The `VerticalAutoscaler` conversions under one name (`convert::vertical::*`, which the
//! service imports): requests in [`super::vertical_request`], responses in
//! [`super::vertical_response`].

pub(crate) use super::{vertical_request::*, vertical_response::*};
