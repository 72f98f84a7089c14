module github.com/govinfer/govinfer

go 1.26.0

require (
	// chromedp drives Debian's chromium in the chat page's browser test
	// (httpapi/webui/browser_test.go); only tests import it, so the
	// govinfer binary does not link it.
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.23.1
	github.com/go-zeromq/zmq4 v0.17.0
	github.com/klauspost/cpuid/v2 v2.4.2
	github.com/valyala/fasthttp v1.78.0
	github.com/vmihailenco/msgpack/v5 v5.4.1
	github.com/vulkan-go/vulkan v0.0.0-20221209234627-c0a353ae26c8
	golang.org/x/image v0.47.0
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
	golang.org/x/text v0.43.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
