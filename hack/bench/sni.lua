-- wrk script: connect to $WRK_CONNECT (an IP) while the URL's host stays
-- the TLS SNI, as a client that dials the API server name through the
-- node proxy does (passthrough by SNI).
local addr = os.getenv("WRK_CONNECT")
function wrk.resolve(host, service)
   wrk.addrs = wrk.lookup(addr, service)
end
