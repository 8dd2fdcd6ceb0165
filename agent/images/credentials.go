package images

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// credentials is a keychain read from a file in the format of Docker's
// config.json ("auths" by registry host):
//
//	{"auths": {"registry.example:5000": {"auth": "<base64 user:password>"},
//	           "ghcr.io": {"username": "u", "password": "p"},
//	           "other.example": {"identitytoken": "..."}}}
//
// A registry absent from it is accessed anonymously. Keys may carry a
// scheme and a path ("https://index.docker.io/v1/"): only the host counts.
type credentials map[string]authn.AuthConfig

// readCredentials reads a credentials file; it must not be readable by
// others (the agent refuses a world-readable one, naming it).
func readCredentials(path string) (credentials, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("image credentials: %w", err)
	}
	if st.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("image credentials %s: readable by every user (mode %v): chmod o-r it", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image credentials: %w", err)
	}
	return parseCredentials(data)
}

// parseCredentials reads the "auths" of a Docker config.json.
func parseCredentials(data []byte) (credentials, error) {
	var file struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("image credentials: %w", err)
	}
	out := credentials{}
	for key, cfg := range file.Auths {
		host := key
		if _, rest, ok := strings.Cut(host, "://"); ok {
			host = rest
		}
		host, _, _ = strings.Cut(host, "/")
		if host == "" {
			return nil, fmt.Errorf("image credentials: auths key %q names no registry host", key)
		}
		if cfg.Auth != "" && cfg.Username == "" {
			raw, err := base64.StdEncoding.DecodeString(cfg.Auth)
			if err != nil {
				return nil, fmt.Errorf("image credentials: auths[%q].auth: not base64: %w", key, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("image credentials: auths[%q].auth: want base64 of user:password", key)
			}
			cfg.Username, cfg.Password, cfg.Auth = user, pass, ""
		}
		if cfg.Username == "" && cfg.IdentityToken == "" && cfg.RegistryToken == "" {
			return nil, fmt.Errorf("image credentials: auths[%q] has no auth, username, identitytoken or registrytoken", key)
		}
		out[host] = cfg
	}
	return out, nil
}

// Resolve implements authn.Keychain.
func (c credentials) Resolve(r authn.Resource) (authn.Authenticator, error) {
	host := r.RegistryStr()
	cfg, ok := c[host]
	if !ok && host == "index.docker.io" {
		cfg, ok = c["docker.io"]
	}
	if !ok {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(cfg), nil
}
