//! The `VerticalAutoscaler` conversions under one name (`convert::vpa::*`, which the
//! service imports): requests in [`super::vpa_request`], responses in autoscaled-wire's
//! [`autoscaled_wire::convert::vpa_response`].

pub(crate) use super::vpa_request::*;
pub(crate) use autoscaled_wire::convert::vpa_response::*;
