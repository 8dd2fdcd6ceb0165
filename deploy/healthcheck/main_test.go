package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/grpchealth"
)

func TestCheck(t *testing.T) {
	checker := grpchealth.NewStaticChecker("slackline.v1.OperatorService")
	mux := http.NewServeMux()
	mux.Handle(grpchealth.NewHandler(checker))
	for _, srv := range []*httptest.Server{httptest.NewServer(mux), httptest.NewTLSServer(mux)} {
		defer srv.Close()
		if err := check(srv.URL, time.Second); err != nil {
			t.Errorf("%s: %v, want SERVING", srv.URL, err)
		}
	}
	checker.SetStatus("", grpchealth.StatusNotServing)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if err := check(srv.URL, time.Second); err == nil {
		t.Error("NOT_SERVING passed the check")
	}
	if err := check(srv.URL+"/nothing-here", time.Second); err == nil {
		t.Error("a 404 passed the check")
	}
}
