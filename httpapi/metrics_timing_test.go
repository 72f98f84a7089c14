package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkMetricsHandler measures one /metrics scrape as the handler
// writes it (the router scrapes every 50 ms per replica), after some
// traffic so that every series has values.
func BenchmarkMetricsHandler(b *testing.B) {
	s := startServer(b, Config{})
	post(b, s, "/v1/chat/completions", chatBody("hi", 4))
	get(b, s, "/v1/models")
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		s.handleMetrics(&ctx)
	}
	b.ReportMetric(float64(len(ctx.Response.Body())), "bytes/scrape")
}

// scraper GETs /metrics at rate per second until stop is closed, as
// Prometheus does (one kept connection), and returns the count.
func scraper(addr string, rate int, stop <-chan struct{}) <-chan int {
	done := make(chan int, 1)
	go func() {
		n := 0
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		for {
			select {
			case <-stop:
				done <- n
				return
			case <-t.C:
				if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					n++
				}
			}
		}
	}()
	return done
}

// cpuTime returns the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestScrapeLoad is the load test behind docs/replicas.md's claim that 20
// scrapes/s do not slow decoding measurably: rounds of greedy 128-token
// completions alternate between no scraper and one at 20 scrapes/s, and
// the medians of their tokens/s are compared. It takes a minute, so it
// runs only with GOVINFER_LOADTEST=1; on a quiet machine the medians agree
// within a few percent, and it fails below 90%.
func TestScrapeLoad(t *testing.T) {
	if os.Getenv("GOVINFER_LOADTEST") == "" {
		t.Skip("set GOVINFER_LOADTEST=1 to run the scrape load test")
	}
	s := startServer(t, Config{})
	body := map[string]any{"model": "test-model", "prompt": "Once upon a time", "max_tokens": 128, "temperature": 0, "ignore_eos": true}
	post(t, s, "/v1/completions", body) // warm up
	const rounds, perRound = 8, 8
	var plain, scraped, plainCPU, scrapedCPU []float64
	scrapes := 0
	var scrapedTime time.Duration
	for r := range 2 * rounds {
		withScraper := r%2 == 1
		stop := make(chan struct{})
		var count <-chan int
		if withScraper {
			count = scraper(s.Addr(), 20, stop)
		}
		start, cpu := time.Now(), cpuTime()
		for range perRound {
			if status, data := post(t, s, "/v1/completions", body); status != 200 {
				t.Fatalf("%d %s", status, data)
			}
		}
		d := time.Since(start)
		close(stop)
		rate := float64(perRound*128) / d.Seconds()
		perToken := (cpuTime() - cpu).Seconds() * 1e6 / float64(perRound*128)
		if withScraper {
			scraped, scrapedCPU = append(scraped, rate), append(scrapedCPU, perToken)
			scrapes += <-count
			scrapedTime += d
		} else {
			plain, plainCPU = append(plain, rate), append(plainCPU, perToken)
		}
	}
	for _, v := range [][]float64{plain, scraped, plainCPU, scrapedCPU} {
		slices.Sort(v)
	}
	mp, ms := plain[rounds/2], scraped[rounds/2]
	t.Logf("decode tok/s, median of %d rounds of %d completions: %.1f without scrapes, %.1f with %.1f scrapes/s (ratio %.3f); all rounds: %.0f / %.0f",
		rounds, perRound, mp, ms, float64(scrapes)/scrapedTime.Seconds(), ms/mp, plain, scraped)
	t.Logf("process CPU per decoded token (server, clients and scraper): median %.0f us without scrapes, %.0f us with; all rounds: %.0f / %.0f",
		plainCPU[rounds/2], scrapedCPU[rounds/2], plainCPU, scrapedCPU)
	if ms < 0.9*mp {
		t.Errorf("decoding at %.1f tok/s under scrapes, %.1f without", ms, mp)
	}
}

// BenchmarkDecodeUnderScrapes decodes one greedy 128-token completion per
// iteration with nobody scraping and with a client scraping /metrics over
// HTTP every 50 ms (20 scrapes/s, the llm-d router's rate): compare the
// two tok/s, run alternately (-count 5).
func BenchmarkDecodeUnderScrapes(b *testing.B) {
	s := startServer(b, Config{})
	body := map[string]any{"model": "test-model", "prompt": "Once upon a time", "max_tokens": 128, "temperature": 0, "ignore_eos": true}
	post(b, s, "/v1/completions", body) // warm up
	for _, rate := range []int{0, 20} {
		b.Run(fmt.Sprintf("scrapes=%d", rate), func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			scrapes := 0
			var scrapeTime time.Duration
			if rate > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t := time.NewTicker(time.Second / time.Duration(rate))
					defer t.Stop()
					for {
						select {
						case <-stop:
							return
						case <-t.C:
							start := time.Now()
							resp, err := http.Get("http://" + s.Addr() + "/metrics")
							if err == nil {
								io.Copy(io.Discard, resp.Body) // keeps the connection, as Prometheus does
								resp.Body.Close()
								scrapes++
								scrapeTime += time.Since(start)
							}
						}
					}
				}()
			}
			tokens := 0
			for b.Loop() {
				if status, data := post(b, s, "/v1/completions", body); status != 200 {
					b.Fatalf("%d %s", status, data)
				}
				tokens += 128
			}
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(float64(scrapes)/b.Elapsed().Seconds(), "scrapes/s")
			if scrapes > 0 {
				b.ReportMetric(scrapeTime.Seconds()*1e3/float64(scrapes), "ms/scrape")
			}
		})
	}
}
