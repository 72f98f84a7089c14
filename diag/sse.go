package diag

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxEventBytes bounds one server-sent event.
const maxEventBytes = 8 << 20

// sseReader reads the data payloads of a text/event-stream body.
type sseReader struct {
	r *bufio.Reader
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the data of the next event: its "data:" lines joined by
// newlines. Comments, other fields and events without data are skipped. It
// returns io.EOF at a clean end of stream and io.ErrUnexpectedEOF when the
// stream ends inside an event.
func (s *sseReader) next() (string, error) {
	var (
		data    strings.Builder
		hasData bool
		size    int
	)
	for {
		line, err := s.r.ReadString('\n')
		size += len(line)
		if size > maxEventBytes {
			return "", fmt.Errorf("event-stream: event larger than %d bytes", maxEventBytes)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		if errors.Is(err, io.EOF) {
			if line == "" {
				if hasData {
					return "", io.ErrUnexpectedEOF
				}
				return "", io.EOF
			}
			// A last line without its newline: the stream was cut.
			return "", io.ErrUnexpectedEOF
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if hasData {
				return data.String(), nil
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // comment / keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		if field != "data" {
			continue // event:, id:, retry:
		}
		if hasData {
			data.WriteByte('\n')
		}
		data.WriteString(value)
		hasData = true
	}
}
