module github.com/botrun/botrun/guest-sdk/go

go 1.26
