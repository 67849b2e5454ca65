// Package ca is moat's local certificate authority for TLS termination: it
// creates or loads an ECDSA P-256 CA, issues short-lived per-host leaf
// certificates, and builds the trust bundle mounted into the sandbox.
//
// The CA key is the most sensitive file moat owns: whoever holds it can
// impersonate any host to the sandbox. It is created with mode 0600, a key
// file readable by group or others is refused, and key material never
// appears in errors or logs.
package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// File names inside a LoadOrCreate directory.
const (
	CertFile = "cert.pem"
	KeyFile  = "key.pem"
)

// caValidity is how long a created CA is valid. It is long because
// rotating it means re-trusting it everywhere; the leaves are short.
const caValidity = 10 * 365 * 24 * time.Hour

// Authority is a loaded CA. It is safe for concurrent use.
type Authority struct {
	cert    *x509.Certificate
	certPEM []byte
	signer  crypto.Signer
	leaves  *leafCache
}

// DefaultDir is where LoadOrCreate keeps moat's own CA:
// $XDG_CONFIG_HOME/moat/ca, else ~/.config/moat/ca.
func DefaultDir() (string, error) {
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "moat", "ca"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("ca: default directory: %w", err)
	}
	return filepath.Join(home, ".config", "moat", "ca"), nil
}

// LoadOrCreate loads the CA in dir (cert.pem and key.pem), creating it
// first if neither file exists. An empty dir means DefaultDir. The
// directory is created with mode 0700 and the key with mode 0600. If only
// one of the two files exists it is an error: moat never overwrites a key.
func LoadOrCreate(dir string) (*Authority, error) {
	if dir == "" {
		d, err := DefaultDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	if errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist) {
		if err := create(dir, certPath, keyPath); err != nil {
			return nil, err
		}
	}
	return Load(certPath, keyPath)
}

// create writes a new CA. Both files are opened with O_EXCL, so a
// concurrent creator or a file that appeared meanwhile makes it fail
// rather than overwrite.
func create(dir, certPath, keyPath string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ca: create directory %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("ca: generate key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "moat local CA " + sn.Text(16)[:8], Organization: []string{"moat"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// Leaves only: a stolen leaf key cannot sign further certificates.
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("ca: create certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("ca: encode key: %w", err)
	}
	if err := writeExcl(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	if err := writeExcl(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		// Without its certificate the key is useless; do not leave it
		// behind to make the next LoadOrCreate fail.
		os.Remove(keyPath)
		return err
	}
	return nil
}

func writeExcl(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("ca: create %s: %w", path, err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(path)
		return fmt.Errorf("ca: write %s: %w", path, err)
	}
	return nil
}

// Load loads a CA from a PEM certificate and a PEM private key (PKCS#8,
// SEC 1 EC or PKCS#1 RSA), as named by tlsTerminate.caCertPath and
// caKeyPath. Errors name the path. A key file with any group or other
// permission bit is refused with ErrKeyPermissions.
func Load(certPath, keyPath string) (*Authority, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("ca: read certificate: %w", err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", certPath, err)
	}
	if err := checkKeyPerm(keyPath); err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("ca: read key: %w", err)
	}
	signer, err := parseKey(keyPEM)
	if err != nil {
		// parseKey's errors never quote the key's bytes.
		return nil, fmt.Errorf("ca: %s: %w", keyPath, err)
	}
	if !publicEqual(cert.PublicKey, signer.Public()) {
		return nil, fmt.Errorf("ca: %s and %s: %w", certPath, keyPath, ErrKeyMismatch)
	}
	return &Authority{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		signer:  signer,
		leaves:  newLeafCache(DefaultCacheSize),
	}, nil
}

func checkKeyPerm(keyPath string) error {
	fi, err := os.Stat(keyPath)
	if err != nil {
		return fmt.Errorf("ca: key: %w", err)
	}
	// Windows has no POSIX mode bits worth checking.
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o; run: chmod 600 %s", ErrKeyPermissions, keyPath, fi.Mode().Perm(), keyPath)
	}
	return nil
}

func parseCert(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, ErrNoCertificate
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		if !cert.IsCA || !cert.BasicConstraintsValid || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
			return nil, ErrNotCA
		}
		return cert, nil
	}
}

// parseKey decodes the first private key block. Its errors deliberately
// carry no detail from the parser, which could echo key bytes.
func parseKey(data []byte) (crypto.Signer, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, ErrNoKey
		}
		var k any
		var err error
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s block does not parse", b.Type)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported private key type %T", k)
		}
		return s, nil
	}
}

func publicEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	switch k := a.(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		return k.(equaler).Equal(b)
	}
	return false
}

func serial() (*big.Int, error) {
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("ca: serial number: %w", err)
	}
	// Never zero or tiny: RFC 5280 §4.1.2.2 wants positive serials.
	return sn.Add(sn, big.NewInt(1)), nil
}

// Certificate returns the CA certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// CertPEM returns the CA certificate, PEM-encoded. It holds no key.
func (a *Authority) CertPEM() []byte { return bytes.Clone(a.certPEM) }

// Pool returns a new pool holding only the CA certificate.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.cert)
	return p
}
