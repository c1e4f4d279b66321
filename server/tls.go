package server

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// certFiles serves the certificate of a --tls-cert/--tls-key pair and reads
// the pair again when either file changes, so that a renewed certificate
// (certbot, cert-manager's mounted secret) is served without a restart.
// Each handshake asks for the certificate; the files are looked at
// (os.Stat, following a symlink swap) at most once per recheck, and read
// only when their size or modification time changed. A pair that does not
// load (the certificate renewed before its key is written) is logged and
// the last good one kept, until the files load again.
type certFiles struct {
	certPath, keyPath string
	recheck           time.Duration
	log               zerolog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp // of the files cert was read from
	checked time.Time
	failed  [2]fileStamp // the stamps of the last pair that did not load
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// loadCertFiles reads the pair once: an error here stops the start-up.
func loadCertFiles(certPath, keyPath string, log zerolog.Logger) (*certFiles, error) {
	c := &certFiles{certPath: certPath, keyPath: keyPath, recheck: time.Second, log: log}
	stamp, err := c.stat()
	if err == nil {
		err = c.load(stamp)
	}
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", certPath, keyPath, err)
	}
	c.checked = time.Now()
	return c, nil
}

func (c *certFiles) stat() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, p := range []string{c.certPath, c.keyPath} {
		fi, err := os.Stat(p)
		if err != nil {
			return s, err
		}
		s[i] = fileStamp{fi.Size(), fi.ModTime()}
	}
	return s, nil
}

func (c *certFiles) load(stamp [2]fileStamp) error {
	cert, err := tls.LoadX509KeyPair(c.certPath, c.keyPath)
	if err != nil {
		return err
	}
	c.cert, c.stamp = &cert, stamp
	return nil
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) < c.recheck {
		return c.cert, nil
	}
	c.checked = time.Now()
	stamp, err := c.stat()
	if err != nil {
		c.log.Warn().Err(err).Msg("tls: cannot look at the certificate files; serving the certificate read before")
		return c.cert, nil
	}
	if stamp == c.stamp || stamp == c.failed {
		return c.cert, nil
	}
	if err := c.load(stamp); err != nil {
		c.failed = stamp
		c.log.Warn().Err(err).Str("cert", c.certPath).Str("key", c.keyPath).
			Msg("tls: the certificate files changed but do not load as a pair; serving the certificate read before until they do")
		return c.cert, nil
	}
	c.failed = [2]fileStamp{}
	c.log.Info().Str("cert", c.certPath).Time("not_after", c.cert.Leaf.NotAfter).Msg("tls: certificate reloaded")
	return c.cert, nil
}

// tlsConfig is the HTTPS configuration: TLS 1.2 or later, Go's default
// cipher suites, HTTP/1.1 (the gateway's streams and waits are written for
// it).
func (c *certFiles) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: c.get,
		NextProtos:     []string{"http/1.1"},
	}
}
