module github.com/botrun/botrun/examples/assistant

go 1.26

require github.com/botrun/botrun/guest-sdk/go v0.0.0

replace github.com/botrun/botrun/guest-sdk/go => ../../guest-sdk/go
