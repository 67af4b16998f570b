package evpn

import (
	"log/slog"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// logAdapter gives GoBGP the node's slog logger. GoBGP's Info is chatty
// (every configuration step): it goes to Debug; the speaker logs the
// session changes itself.
type logAdapter struct {
	log *slog.Logger
}

func attrs(f gobgplog.Fields) []any {
	out := make([]any, 0, 2*len(f))
	for k, v := range f {
		out = append(out, k, v)
	}
	return out
}

func (l *logAdapter) Panic(msg string, f gobgplog.Fields) { l.log.Error(msg, attrs(f)...) }
func (l *logAdapter) Fatal(msg string, f gobgplog.Fields) { l.log.Error(msg, attrs(f)...) }
func (l *logAdapter) Error(msg string, f gobgplog.Fields) { l.log.Warn(msg, attrs(f)...) }
func (l *logAdapter) Warn(msg string, f gobgplog.Fields)  { l.log.Warn(msg, attrs(f)...) }
func (l *logAdapter) Info(msg string, f gobgplog.Fields)  { l.log.Debug(msg, attrs(f)...) }
func (l *logAdapter) Debug(msg string, f gobgplog.Fields) {}
func (l *logAdapter) SetLevel(gobgplog.LogLevel)          {}
func (l *logAdapter) GetLevel() gobgplog.LogLevel         { return gobgplog.InfoLevel }
