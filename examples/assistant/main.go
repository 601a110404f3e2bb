// Command assistant is a bot that answers with a language model through any
// OpenAI-compatible chat completions endpoint (llama.cpp's server, Ollama,
// vLLM or a hosted one), the [[apis]] entry "llm" of bot.toml:
//
//	[[apis]]
//	name = "llm"
//	url = "http://127.0.0.1:8081/v1"   # llama-server; Ollama: http://127.0.0.1:11434/v1
//	headers = { Authorization = "Bearer ${LLM_API_KEY}" }
//	timeout = "60s"
//	allow_private = true                 # the model is on this machine
//
// It keeps the chat's last turns in state and sends them as the history,
// shows "typing…" while the model thinks, and answers plainly when the API
// fails. The host journals each answer before the bot reads it, so a
// message handled again after a crash gets the same answer without asking
// the model twice. Build it with make examples.
package main

import (
	"encoding/json"
	"errors"
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

// model is the model the endpoint serves (llama.cpp ignores it; Ollama
// needs one it has pulled). Change it and rebuild.
const model = "llama3.2"

// system is the assistant's instructions.
const system = "You are a helpful assistant in a chat. Answer briefly."

// keep is how many messages of history (the user's and the assistant's)
// the chat keeps and sends.
const keep = 12

// message is one turn of the conversation, as the API takes it.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		text := strings.TrimSpace(ctx.Event.Text)
		if text == "" {
			return nil
		}
		if text == "/reset" {
			if err := ctx.StateDelete("history"); err != nil {
				return err
			}
			_, err := ctx.Reply("Forgotten. What shall we talk about?")
			return err
		}
		var history []message
		if b, ok, err := ctx.StateGet("history"); err != nil {
			return err
		} else if ok {
			json.Unmarshal(b, &history) // a bad history starts over
		}
		history = append(history, message{Role: "user", Content: text})
		ctx.Typing(ctx.Event.Chat) // a courtesy: not every channel shows it
		answer, err := complete(ctx, history)
		if err != nil {
			var failed *bot.FetchError
			if errors.As(err, &failed) || errors.Is(err, errAPI) {
				ctx.Logf(bot.LevelWarn, "the model did not answer: %v", err)
				_, err = ctx.Reply("Sorry, I cannot think right now. Please try again in a minute.")
			}
			return err
		}
		history = append(history, message{Role: "assistant", Content: answer})
		if len(history) > keep {
			history = history[len(history)-keep:]
		}
		b, _ := json.Marshal(history)
		if err := ctx.StateSet("history", b); err != nil {
			return err
		}
		_, err = ctx.Reply(answer)
		return err
	})
}

// errAPI is an answer of the API that holds no completion.
var errAPI = errors.New("the completions API answered without a completion")

// complete asks the model for the next message after history.
func complete(ctx *bot.Context, history []message) (string, error) {
	body, _ := json.Marshal(map[string]any{
		"model":    model,
		"messages": append([]message{{Role: "system", Content: system}}, history...),
	})
	res, err := ctx.Fetch("llm", bot.Request{Method: "POST", Path: "/chat/completions",
		Header: map[string]string{"Content-Type": "application/json"}, Body: body})
	if err != nil {
		return "", err
	}
	if res.Status != 200 {
		return "", errors.Join(errAPI, errors.New("HTTP status "+http(res.Status)))
	}
	var out struct {
		Choices []struct {
			Message message `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil || len(out.Choices) == 0 || strings.TrimSpace(out.Choices[0].Message.Content) == "" {
		return "", errAPI
	}
	return strings.TrimSpace(out.Choices[0].Message.Content), nil
}

// http is a status as text.
func http(status int) string {
	b, _ := json.Marshal(status)
	return string(b)
}

func main() {}
