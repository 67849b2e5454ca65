package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// systemBundles are the places Linux distributions and macOS keep the
// system roots as one PEM file (the list crypto/x509 searches). The first
// that exists is used.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine, macOS
}

// TrustBundle returns the PEM bundle the sandbox trusts: the moat CA, the
// system roots (SSL_CERT_FILE if set, else the first system bundle file
// found; none is tolerated), and every file of extraPaths
// (extraCaCertPaths). An extra file that cannot be read or holds no valid
// certificate is an error naming it.
func TrustBundle(a *Authority, extraPaths []string) ([]byte, error) {
	if a == nil {
		return nil, errors.New("ca: trust bundle needs an authority")
	}
	var buf bytes.Buffer
	buf.Write(a.certPEM)
	sys := systemBundles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		sys = []string{f}
	}
	for _, p := range sys {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ca: system roots: %w", err)
		}
		appendPEMCerts(&buf, data)
		break
	}
	for _, p := range extraPaths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("ca: extra CA certificate: %w", err)
		}
		if appendPEMCerts(&buf, data) == 0 {
			return nil, fmt.Errorf("ca: extra CA certificate %s: %w", p, ErrNoCertificate)
		}
	}
	return buf.Bytes(), nil
}

// appendPEMCerts re-encodes every parseable CERTIFICATE block of data into
// buf and returns how many there were; anything else (keys, comments,
// garbage) is dropped so that it never lands in the sandbox.
func appendPEMCerts(buf *bytes.Buffer, data []byte) int {
	n := 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return n
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			continue
		}
		buf.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes}))
		n++
	}
}
