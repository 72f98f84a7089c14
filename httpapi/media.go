package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
)

// Defaults of the media Config fields.
const (
	DefaultMediaMaxBytes = 20 << 20
	DefaultMediaTimeout  = 10 * time.Second
)

// imageMediaTypes are the media types a data: URL or a base64 image block
// may declare.
var imageMediaTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/jpg": true, "image/gif": true, "image/webp": true}

// media resolves image URLs to bytes: data: URLs, and http(s) URLs of the
// allowed hosts only.
type media struct {
	allowed  map[string]bool // exact host names (or IP literals)
	maxBytes int64
	timeout  time.Duration
	client   *http.Client
}

func newMedia(cfg Config) *media {
	m := &media{allowed: map[string]bool{}, maxBytes: int64(cfg.MediaMaxBytes), timeout: cfg.MediaTimeout}
	if m.maxBytes <= 0 {
		m.maxBytes = DefaultMediaMaxBytes
	}
	if m.timeout <= 0 {
		m.timeout = DefaultMediaTimeout
	}
	for _, h := range cfg.AllowedMediaDomains {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			m.allowed[h] = true
		}
	}
	dialer := &net.Dialer{Timeout: m.timeout, Control: m.checkAddress}
	m.client = &http.Client{
		Transport: &http.Transport{DialContext: dialer.DialContext, Proxy: nil, ResponseHeaderTimeout: m.timeout},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if !strings.EqualFold(req.URL.Hostname(), via[0].URL.Hostname()) {
				return fmt.Errorf("redirected to another host (%s)", req.URL.Hostname())
			}
			return nil
		},
	}
	return m
}

// checkAddress refuses connections to loopback, private, link-local and
// unspecified addresses, unless that address itself is an allowed host.
func (m *media) checkAddress(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("not an IP address: %s", host)
	}
	if m.allowed[ip.String()] {
		return nil
	}
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("the address %s is not public (list it in --allowed-media-domains to allow it)", ip)
	}
	return nil
}

// image returns the bytes of the image at u (a data: URL or an http(s) URL
// of an allowed host); field names the URL in the request for errors.
func (m *media) image(u, field string) ([]byte, *apiError) {
	if rest, ok := cutPrefixFold(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		if !ok {
			return nil, badRequest(field, "%s: malformed data URL (no comma)", field)
		}
		typ, isB64 := strings.CutSuffix(meta, ";base64")
		if !isB64 {
			return nil, badRequest(field, "%s: the data URL must be base64 (data:image/png;base64,...)", field)
		}
		return decodeImageData(typ, data, field)
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, badRequest(field, "%s: an image URL must be a data: URL or an http(s) URL", field)
	}
	host := strings.ToLower(pu.Hostname())
	if !m.allowed[host] {
		return nil, badRequest(field, "%s: fetching images from %q is not allowed (the server's --allowed-media-domains)", field, host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, badRequest(field, "%s: %v", field, err)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, badRequest(field, "%s: fetching the image failed: %v", field, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, badRequest(field, "%s: fetching the image failed: HTTP %d", field, resp.StatusCode)
	}
	if resp.ContentLength > m.maxBytes {
		return nil, badRequest(field, "%s: the image is %d bytes; at most %d are allowed", field, resp.ContentLength, m.maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, m.maxBytes+1))
	if err != nil {
		return nil, badRequest(field, "%s: fetching the image failed: %v", field, err)
	}
	if int64(len(data)) > m.maxBytes {
		return nil, badRequest(field, "%s: the image is more than %d bytes", field, m.maxBytes)
	}
	return data, nil
}

// decodeImageData decodes a base64 image of the media type typ.
func decodeImageData(typ, data, field string) ([]byte, *apiError) {
	if !imageMediaTypes[strings.ToLower(typ)] {
		return nil, badRequest(field, "%s: unsupported media type %q (want image/png, image/jpeg, image/gif or image/webp)", field, typ)
	}
	data = strings.TrimRight(data, "=")
	b, err := base64.RawStdEncoding.DecodeString(data)
	if err != nil {
		if b, err = base64.RawURLEncoding.DecodeString(data); err != nil {
			return nil, badRequest(field, "%s: malformed base64 data", field)
		}
	}
	return b, nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// chatImages resolves the image parts of chat messages, in order: image_url
// parts ({"url": ...} or a string), input_image parts (image_url a string)
// and image parts (image a URL string).
func (s *Server) chatImages(msgs []any) ([]llm.Image, *apiError) {
	var out []llm.Image
	for i, m := range msgs {
		mo, _ := m.(*jsonvalue.Object)
		if mo == nil {
			continue
		}
		c, _ := mo.Get("content")
		parts, _ := c.([]any)
		for k, part := range parts {
			po, _ := part.(*jsonvalue.Object)
			if po == nil {
				continue
			}
			t, _ := po.Get("type")
			typ, _ := t.(string)
			pf := fmt.Sprintf("messages[%d].content[%d]", i, k)
			var u, field string
			switch typ {
			case "image_url", "input_image":
				field = pf + ".image_url"
				v, _ := po.Get("image_url")
				switch x := v.(type) {
				case string:
					u = x
				case *jsonvalue.Object:
					uv, _ := x.Get("url")
					u, _ = uv.(string)
					field += ".url"
				}
				if u == "" && typ == "input_image" {
					if _, ok := po.Get("file_id"); ok {
						return nil, badRequest(pf+".file_id", "%s.file_id: files are not supported; send the image as a data: URL", pf)
					}
				}
			case "image":
				field = pf + ".image"
				v, _ := po.Get("image")
				u, _ = v.(string)
			default:
				continue
			}
			if u == "" {
				return nil, badRequest(field, "%s: an image URL (a string) is required", field)
			}
			data, err := s.media.image(u, field)
			if err != nil {
				return nil, err
			}
			out = append(out, llm.Image{Data: data})
		}
	}
	return out, nil
}
