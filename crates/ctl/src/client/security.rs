//! TLS, mTLS and bearer-token options of the command-line client (`--ca`, `--cert`, `--key`,
//! `--token`), shared by every subcommand that talks to a server.
//!
//! TLS is on when `--ca` is given or the address is an `https://` URI; the server name checked
//! is the address's host (or `--tls-server-name`). The token is sent as `authorization: Bearer
//! TOKEN` on every call; prefer the `AUTOSCALED_TOKEN` variable to the flag, which other users
//! of the machine can read in the process list.

use std::path::{Path, PathBuf};

use tonic::{
    Request, Status,
    metadata::MetadataValue,
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
};

use crate::client::ClientError;
use autoscaled_wire::pb::v1::horizontal_autoscaler_client::HorizontalAutoscalerClient;

/// The client's credentials, as flags (and environment variables).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClientSecurity {
    /// CA certificates (PEM) to verify the server with; turns TLS on.
    #[arg(long, env = "AUTOSCALED_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS; needs --key and TLS.
    #[arg(long, env = "AUTOSCALED_CERT", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, env = "AUTOSCALED_KEY", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Bearer token sent as `authorization: Bearer TOKEN` (prefer the variable: flags show in `ps`).
    #[arg(
        long,
        env = "AUTOSCALED_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Server name to verify in its certificate. [default: the host of --addr]
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

/// Adds the bearer token to every call.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl Interceptor for Credentials {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|source| ClientError::Read {
        path: path.display().to_string(),
        source,
    })
}

impl ClientSecurity {
    fn tls(&self, addr: &str) -> bool {
        self.ca.is_some() || addr.starts_with("https://")
    }

    /// The endpoint of `addr` (`host:port` or a URI) with these credentials' TLS settings.
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, ClientError> {
        let bad = |detail: String| ClientError::Address {
            addr: addr.to_owned(),
            detail,
        };
        let tls = self.tls(addr);
        let uri = if addr.contains("://") {
            addr.to_owned()
        } else if tls {
            format!("https://{addr}")
        } else {
            format!("http://{addr}")
        };
        let endpoint = Endpoint::from_shared(uri).map_err(|e| bad(e.to_string()))?;
        if !tls {
            if self.cert.is_some() || self.key.is_some() {
                return Err(bad("--cert and --key need TLS: give --ca".to_owned()));
            }
            return Ok(endpoint);
        }
        let Some(ca) = &self.ca else {
            return Err(bad(
                "an https:// address needs --ca FILE (the CA that signed the server's certificate)"
                    .to_owned(),
            ));
        };
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => return Err(bad("--cert and --key go together".to_owned())),
        }
        if let Some(name) = &self.tls_server_name {
            config = config.domain_name(name.clone());
        }
        endpoint.tls_config(config).map_err(|e| bad(e.to_string()))
    }

    /// The interceptor that sends the token.
    pub fn credentials(&self) -> Result<Credentials, ClientError> {
        let authorization = match &self.token {
            Some(token) => Some(format!("Bearer {}", token.trim()).parse().map_err(|_| {
                ClientError::Address {
                    addr: "--token".to_owned(),
                    detail: "the token must be printable ASCII".to_owned(),
                }
            })?),
            None => None,
        };
        Ok(Credentials { authorization })
    }

    /// A connected channel to `addr`.
    pub async fn channel(&self, addr: &str) -> Result<Channel, ClientError> {
        self.endpoint(addr)?
            .connect()
            .await
            .map_err(|source| ClientError::Connect {
                addr: addr.to_owned(),
                source,
            })
    }

    /// A HorizontalAutoscaler client for `addr` with these credentials.
    pub async fn horizontal(
        &self,
        addr: &str,
    ) -> Result<HorizontalAutoscalerClient<InterceptedService<Channel, Credentials>>, ClientError>
    {
        let credentials = self.credentials()?;
        Ok(HorizontalAutoscalerClient::with_interceptor(
            self.channel(addr).await?,
            credentials,
        ))
    }
}
