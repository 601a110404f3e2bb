package fetch

import (
	"fmt"
	"net/url"
	"strings"
)

// joinPath returns the URL of p (a plain absolute path with an optional
// query) under base's path prefix, or an error wrapping ErrBadPath. It
// refuses, rather than cleans, anything that could leave the prefix or
// the origin: a relative or "//" path, a backslash, a control character,
// a space or any byte outside ASCII, a fragment, a malformed percent
// escape, and every "." or ".." segment or encoded "/" or "\", encoded or not.
func joinPath(base *url.URL, p string) (*url.URL, error) {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return nil, fmt.Errorf("%w: %q: a path starts with a single \"/\" (no scheme, no host)", ErrBadPath, p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '\\' || c == '#' {
			return nil, fmt.Errorf("%w: %q: byte %d (%q) is not allowed in a path: percent-encode it, or leave it out", ErrBadPath, p, i, c)
		}
	}
	rawPath, rawQuery, _ := strings.Cut(p, "?")
	if err := checkSegments(rawPath); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadPath, p, err)
	}
	joined := strings.TrimSuffix(base.EscapedPath(), "/") + rawPath
	decoded, err := url.PathUnescape(joined)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadPath, p, err)
	}
	return &url.URL{Scheme: base.Scheme, Host: base.Host, Path: decoded, RawPath: joined, RawQuery: rawQuery}, nil
}

// checkSegments refuses the segments of an escaped absolute path that are
// "." or ".." (also before a ";" parameter, which some servers strip:
// "..;"), or that decode to a "/", a "\" or a control character.
func checkSegments(escaped string) error {
	for _, seg := range strings.Split(strings.TrimPrefix(escaped, "/"), "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return fmt.Errorf("segment %q: %w", seg, err)
		}
		if name, _, _ := strings.Cut(dec, ";"); name == "." || name == ".." {
			return fmt.Errorf("segment %q is a %q: name the resource without it", seg, name)
		}
		for i := 0; i < len(dec); i++ {
			if c := dec[i]; c < ' ' || c == 0x7f || c == '/' || c == '\\' {
				return fmt.Errorf("segment %q decodes to %q, which a segment may not hold", seg, c)
			}
		}
	}
	return nil
}
