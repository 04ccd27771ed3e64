// NATS decentralised authentication for the bridge tests, made by the test
// itself (Debian packages no `nsc`): an operator, a system account, an
// application account with JetStream, a user of that account, and a rogue
// user signed by an account the server does not know. Keys are Ed25519
// (made and used through the `openssl` program, which the TLS test needs
// anyway), encoded as NKeys (a prefix byte, the key, a CRC-16, base32), and
// the claims are JWTs signed with them ("ed25519-nkey").
#pragma once

#include <string>

namespace shm::test {

struct NatsCredentials {
  std::string server_config;  // for `nats-server -c`: operator, resolver, preloaded accounts
  std::string user_creds;     // a credentials file the server accepts
  std::string rogue_creds;    // well-formed, but its account is unknown to the server
  std::string user_seed;      // the user's NKey seed: a secret no output may show
};

// Writes everything into `dir`. False, with what went wrong in `log`, when
// the openssl program fails.
[[nodiscard]] bool mint_nats_credentials(const std::string& dir, NatsCredentials& out,
                                         std::string& log);

}  // namespace shm::test
