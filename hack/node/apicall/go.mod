module hcp-ingress.dev/apicall

go 1.26
