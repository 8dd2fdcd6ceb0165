package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// schemeHint turns the errors of a client speaking the wrong protocol to
// a server (http to an https port, or https to an http one) into errors
// that say what to do, instead of "400 Bad Request" or a TLS record error.
type schemeHint struct{ next http.RoundTripper }

// tlsOnlyBody starts net/http's answer to plain http on a TLS port.
const tlsOnlyBody = "Client sent an HTTP request to an HTTPS server"

func (s schemeHint) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	host := r.URL.Host
	if err != nil {
		if r.URL.Scheme == "https" && (strings.Contains(err.Error(), "first record does not look like a TLS handshake") ||
			strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")) {
			return nil, fmt.Errorf("%s speaks plain http, not https: use --coordinator http://%s (or set %s, or a context: slacklinectl config)", host, host, coordinatorEnv)
		}
		return nil, err
	}
	if r.URL.Scheme == "http" && resp.StatusCode == http.StatusBadRequest {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, int64(len(tlsOnlyBody))))
		if string(head) == tlsOnlyBody {
			resp.Body.Close()
			return nil, fmt.Errorf("%s serves https, not plain http: use --coordinator https://%s with --ca FILE and --token-file FILE "+
				"(after `make run`: its context is current, so drop --coordinator; or `. .run/env`)", host, host)
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	}
	return resp, nil
}
