module hcp-ingress.dev/userpod

go 1.26
