//! The `VerticalAutoscaler` conversions under one name (`convert::vpa::*`, which the
//! service imports): requests in [`super::vpa_request`], responses in
//! [`super::vpa_response`].

pub(crate) use super::{vpa_request::*, vpa_response::*};
