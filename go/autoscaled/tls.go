package autoscaled

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/ioutil"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TLSConfig is the TLS configuration for an autoscaled server started with --tls-cert:
// caFile (PEM) verifies the server's certificate; certFile and keyFile (PEM, both or
// neither) are the client certificate for a server started with --tls-client-ca (mTLS),
// whose URI SAN (SPIFFE ID), else DNS SAN, else CN is the caller's identity in the
// server's authorization file. serverName overrides the name checked in the server's
// certificate ("": the host of the address given to Dial).
func TLSConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	pem, err := ioutil.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("autoscaled: CA file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("autoscaled: no PEM certificate in %s", caFile)
	}
	config := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	switch {
	case certFile != "" && keyFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("autoscaled: client certificate: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	case certFile != "" || keyFile != "":
		return nil, errors.New("autoscaled: the client certificate and key go together")
	}
	return config, nil
}

// WithTLSFiles makes Dial use TLS (caFile only) or mTLS (with certFile and keyFile); see
// TLSConfig. The error is about the files, before anything is dialled.
func WithTLSFiles(caFile, certFile, keyFile string) (Option, error) {
	config, err := TLSConfig(caFile, certFile, keyFile, "")
	if err != nil {
		return nil, err
	}
	return WithTransportCredentials(credentials.NewTLS(config)), nil
}

// WithToken sends `authorization: Bearer TOKEN` on every call, for a server whose
// authorization file lists the token's SHA-256. The token is only sent over TLS (grpc-go
// refuses to send it on a plaintext connection), so combine it with WithTLSFiles.
func WithToken(token string) Option {
	return WithDialOptions(grpc.WithPerRPCCredentials(bearerToken(token)))
}

type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return true }
