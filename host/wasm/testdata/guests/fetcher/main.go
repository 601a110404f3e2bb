// Command fetcher is a test guest that makes the API calls its message
// asks for, as JSON: {"api", "method", "path", "headers", "body", "calls"}
// (calls: how many times, default 1). It replies with one line per call:
// "<status> <header X-Echo> <body>" for a response, "FAILED <reason>: <message>"
// for a call that got none, "ERROR <error>" for anything else.
package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

type ask struct {
	API     string            `json:"api"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Calls   int               `json:"calls"`
}

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		var a ask
		if err := json.Unmarshal([]byte(ctx.Event.Text), &a); err != nil {
			_, err := ctx.Reply("ERROR " + err.Error())
			return err
		}
		var lines []string
		for range max(a.Calls, 1) {
			res, err := ctx.Fetch(a.API, bot.Request{Method: a.Method, Path: a.Path, Header: a.Headers, Body: []byte(a.Body)})
			var failed *bot.FetchError
			switch {
			case errors.As(err, &failed):
				lines = append(lines, "FAILED "+failed.Reason+": "+failed.Message)
			case err != nil:
				lines = append(lines, "ERROR "+err.Error())
			default:
				lines = append(lines, strconv.Itoa(res.Status)+" "+res.Header["X-Echo"]+" "+string(res.Body))
			}
		}
		_, err := ctx.Reply(strings.Join(lines, "\n"))
		return err
	})
}

func main() {}
