package metadata

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// Timeouts of one HTTP metadata request, as upstream's HTTPStoragePlugin
// sets them (CURLOPT_TIMEOUT_MS 3000, CURLOPT_CONNECTTIMEOUT_MS 1500).
const (
	httpMetadataTimeout        = 3 * time.Second
	httpMetadataConnectTimeout = 1500 * time.Millisecond
)

// httpErrorBodyLimit bounds how much of a failed response's body is read
// into an error message.
const httpErrorBodyLimit = 512

// HTTPStore is a Store backed by an upstream-compatible HTTP
// metadata server (mooncake_http_metadata_server, the KV master's embedded
// one, or upstream's C++/Python servers). A key K lives at
// URL + "?key=" + escaped K, and is read with GET, written with PUT and
// removed with DELETE. It is safe for concurrent use.
type HTTPStore struct {
	base      string
	client    *http.Client
	transport *http.Transport
}

// NewHTTPStore returns a store talking to the metadata server at url, the
// full endpoint such as "http://host:8080/metadata". It does not contact the
// server.
func NewHTTPStore(url string) *HTTPStore { return NewHTTPStoreTLS(url, nil) }

// NewHTTPStoreTLS is NewHTTPStore whose https:// requests use cfg (nil:
// the system's roots and no client certificate).
func NewHTTPStoreTLS(url string, cfg *tls.Config) *HTTPStore {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	t.DialContext = (&net.Dialer{
		Timeout:   httpMetadataConnectTimeout,
		KeepAlive: 30 * time.Second,
	}).DialContext
	return &HTTPStore{
		base:      url,
		client:    &http.Client{Transport: t, Timeout: httpMetadataTimeout},
		transport: t,
	}
}

// URL returns the base URL the store was created with.
func (s *HTTPStore) URL() string { return s.base }

// keyURL is the request URL of key. url.QueryEscape writes a space as '+';
// it is written as %20 instead, as curl_easy_escape does upstream, so that
// servers that do not decode '+' (upstream's C++ one) see the same key.
func (s *HTTPStore) keyURL(key string) string {
	return s.base + "?key=" + strings.ReplaceAll(url.QueryEscape(key), "+", "%20")
}

// MaxValueBytes bounds a value read from an HTTP metadata server (as the
// metadata server bounds the values it stores).
const MaxValueBytes = 64 << 20

// Get returns the value stored under key, or an error wrapping
// ErrNotFound when the server answers 404.
func (s *HTTPStore) Get(ctx context.Context, key string) ([]byte, error) {
	resp, err := s.do(ctx, http.MethodGet, key, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		// The server is another process: read no more than a value may
		// hold (the metadata server refuses larger PUTs too).
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueBytes+1))
		if err != nil {
			return nil, errcode.Errorf(errcode.Metadata, err, "GET %s: read body", s.keyURL(key))
		}
		if len(body) > MaxValueBytes {
			return nil, errcode.Errorf(errcode.Metadata, nil, "GET %s: value over %d bytes", s.keyURL(key), MaxValueBytes)
		}
		return body, nil
	case http.StatusNotFound:
		return nil, errcode.Errorf(errcode.Metadata, ErrNotFound, "GET %s", s.keyURL(key))
	default:
		return nil, statusError(http.MethodGet, s.keyURL(key), resp)
	}
}

// Put stores value under key. The server refuses to overwrite an rpc_meta
// key with a different value; that refusal is returned as an error.
func (s *HTTPStore) Put(ctx context.Context, key string, value []byte) error {
	resp, err := s.do(ctx, http.MethodPut, key, value)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := statusError(http.MethodPut, s.keyURL(key), resp)
		if resp.StatusCode == http.StatusBadRequest && strings.Contains(e.Msg, "Duplicate rpc_meta key") {
			e.Err = ErrNameTaken
		}
		return e
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// ErrNameTaken is a Put of an rpc_meta key that the HTTP metadata server
// refused because it holds another engine's address: the segment name is
// in use by another engine.
var ErrNameTaken = errors.New("metadata: the segment name is registered by another engine")

// Delete removes key. A key the server does not have (404) is not an error.
func (s *HTTPStore) Delete(ctx context.Context, key string) error {
	resp, err := s.do(ctx, http.MethodDelete, key, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return statusError(http.MethodDelete, s.keyURL(key), resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// Close releases idle connections. The store must not be used afterwards.
func (s *HTTPStore) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// do sends one request; the client's 3 s timeout bounds it in addition to
// ctx.
func (s *HTTPStore) do(ctx context.Context, method, key string, body []byte) (*http.Response, error) {
	u := s.keyURL(key)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, errcode.Errorf(errcode.Metadata, err, "%s %s", method, u)
	}
	if method == http.MethodPut {
		if body == nil {
			// Send an explicit empty body (Content-Length: 0).
			req.Body = http.NoBody
		}
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, errcode.Errorf(errcode.Metadata, err, "%s %s", method, u)
	}
	return resp, nil
}

// statusError describes a non-200 answer, with the start of its body.
func statusError(method, u string, resp *http.Response) *errcode.Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, httpErrorBodyLimit))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return errcode.Errorf(errcode.Metadata, nil, "%s %s: http %d: %s",
		method, u, resp.StatusCode, strings.TrimSpace(string(b)))
}
