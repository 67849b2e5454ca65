package ca

import "errors"

// ErrKeyPermissions is returned when a CA key file can be read or written
// by its group or by others: anyone who can read the key can mint
// certificates the sandbox trusts.
var ErrKeyPermissions = errors.New("ca: key file is accessible by group or others")

// ErrNoCertificate is returned when a certificate file holds no PEM
// CERTIFICATE block.
var ErrNoCertificate = errors.New("ca: no PEM certificate found")

// ErrNoKey is returned when a key file holds no PEM private key block.
var ErrNoKey = errors.New("ca: no PEM private key found")

// ErrNotCA is returned when the loaded certificate cannot sign
// certificates (no CA basic constraint or no cert-sign key usage).
var ErrNotCA = errors.New("ca: certificate is not a CA")

// ErrKeyMismatch is returned when the key does not belong to the
// certificate.
var ErrKeyMismatch = errors.New("ca: key does not match the certificate")

// ErrBadHost is returned by Leaf for an empty host.
var ErrBadHost = errors.New("ca: leaf needs a host name or IP")
