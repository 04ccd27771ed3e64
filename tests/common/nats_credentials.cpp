#include "common/nats_credentials.hpp"

#include "common/subprocess.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string_view>
#include <vector>

namespace shm::test {
namespace {

using Bytes = std::vector<std::uint8_t>;
using nlohmann::json;

// NKey prefix bytes (the first base32 letter of the encoded key).
constexpr std::uint8_t kPrefixSeed = 18 << 3;      // 'S'
constexpr std::uint8_t kPrefixOperator = 14 << 3;  // 'O'
constexpr std::uint8_t kPrefixAccount = 0;         // 'A'
constexpr std::uint8_t kPrefixUser = 20 << 3;      // 'U'

// CRC-16/XMODEM (polynomial 0x1021, initial 0), as NKeys use it.
std::uint16_t crc16(const Bytes& data) {
  std::uint16_t crc = 0;
  for (const std::uint8_t b : data) {
    crc = static_cast<std::uint16_t>(crc ^ (b << 8));
    for (int i = 0; i < 8; ++i)
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

// RFC 4648 base32, no padding.
std::string base32(const Bytes& data) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  std::string out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (const std::uint8_t b : data) {
    buffer = (buffer << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += kAlphabet[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (5 - bits)) & 31];
  return out;
}

// RFC 4648 base64url, no padding (JWT).
std::string base64url(std::string_view data) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (const char c : data) {
    buffer = (buffer << 8) | static_cast<std::uint8_t>(c);
    bits += 8;
    while (bits >= 6) {
      out += kAlphabet[(buffer >> (bits - 6)) & 63];
      bits -= 6;
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (6 - bits)) & 63];
  return out;
}

std::string nkey(const Bytes& prefix, const Bytes& key) {
  Bytes raw = prefix;
  raw.insert(raw.end(), key.begin(), key.end());
  const std::uint16_t crc = crc16(raw);
  raw.push_back(static_cast<std::uint8_t>(crc & 0xff));
  raw.push_back(static_cast<std::uint8_t>(crc >> 8));
  return base32(raw);
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool openssl(const std::vector<std::string>& args, std::string& log) {
  std::vector<std::string> argv{"/bin/sh", "-c", "exec openssl \"$@\" 2>&1", "openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(std::move(argv));
  const int rc = p.wait(std::chrono::seconds(30));
  if (rc != 0) log += fmt::format("openssl {} (exit {}): {}\n", args.front(), rc, p.output());
  return rc == 0;
}

// An Ed25519 key pair whose private key sits in `<dir>/<name>.der` (PKCS#8).
struct Key {
  std::string file;
  std::uint8_t prefix = 0;
  Bytes seed, public_key;  // 32 bytes each
  [[nodiscard]] std::string public_nkey() const { return nkey({prefix}, public_key); }
  [[nodiscard]] std::string seed_nkey() const {
    return nkey({static_cast<std::uint8_t>(kPrefixSeed | (prefix >> 5)),
                 static_cast<std::uint8_t>((prefix & 31) << 3)},
                seed);
  }
};

bool make_key(const std::string& dir, const std::string& name, std::uint8_t prefix, Key& key,
              std::string& log) {
  key.file = dir + "/" + name + ".der";
  key.prefix = prefix;
  const std::string pub = dir + "/" + name + ".pub.der";
  if (!openssl({"genpkey", "-algorithm", "ed25519", "-outform", "DER", "-out", key.file}, log) ||
      !openssl(
          {"pkey", "-inform", "DER", "-in", key.file, "-pubout", "-outform", "DER", "-out", pub},
          log))
    return false;
  // The DER encodings end with the raw 32-byte seed and public key.
  const Bytes priv = read_file(key.file), pubk = read_file(pub);
  if (priv.size() < 32 || pubk.size() < 32) {
    log += "openssl wrote a key shorter than 32 bytes\n";
    return false;
  }
  key.seed.assign(priv.end() - 32, priv.end());
  key.public_key.assign(pubk.end() - 32, pubk.end());
  return true;
}

// A JWT of `claims` (jti and iat added), signed by `signer`.
bool sign_jwt(const std::string& dir, const Key& signer, json claims, std::string& jwt,
              std::string& log) {
  static std::mt19937_64 rng(std::random_device{}());
  Bytes jti(32);
  for (auto& b : jti) b = static_cast<std::uint8_t>(rng());
  claims["jti"] = base32(jti).substr(0, 52);
  claims["iat"] = static_cast<std::int64_t>(std::time(nullptr));
  const std::string signing_input =
      base64url(json{{"typ", "JWT"}, {"alg", "ed25519-nkey"}}.dump()) + "." +
      base64url(claims.dump());
  const std::string msg = dir + "/jwt-input", sig = dir + "/jwt-signature";
  std::ofstream(msg, std::ios::binary) << signing_input;
  if (!openssl({"pkeyutl", "-sign", "-inkey", signer.file, "-keyform", "DER", "-rawin", "-in", msg,
                "-out", sig},
               log))
    return false;
  const Bytes s = read_file(sig);
  if (s.size() != 64) {
    log += fmt::format("an Ed25519 signature of {} bytes\n", s.size());
    return false;
  }
  jwt = signing_input + "." +
        base64url(std::string_view(reinterpret_cast<const char*>(s.data()), s.size()));
  return true;
}

std::string creds_file(const std::string& jwt, const Key& user) {
  return fmt::format(
      "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n"
      "-----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
      jwt, user.seed_nkey());
}

}  // namespace

bool mint_nats_credentials(const std::string& dir, NatsCredentials& out, std::string& log) {
  Key op, sys, app, user, rogue_app, rogue;
  if (!make_key(dir, "operator", kPrefixOperator, op, log) ||
      !make_key(dir, "system", kPrefixAccount, sys, log) ||
      !make_key(dir, "app", kPrefixAccount, app, log) ||
      !make_key(dir, "user", kPrefixUser, user, log) ||
      !make_key(dir, "rogue-app", kPrefixAccount, rogue_app, log) ||
      !make_key(dir, "rogue", kPrefixUser, rogue, log))
    return false;
  const json unlimited = {{"subs", -1},    {"data", -1},        {"payload", -1}, {"imports", -1},
                          {"exports", -1}, {"wildcards", true}, {"conn", -1},    {"leaf", -1}};
  json with_jetstream = unlimited;  // -1: unlimited, and JetStream enabled for the account
  for (const char* k : {"mem_storage", "disk_storage", "streams", "consumer"})
    with_jetstream[k] = -1;
  const json user_nats = {
      {"pub", json::object()}, {"sub", json::object()}, {"subs", -1},  {"data", -1},
      {"payload", -1},         {"type", "user"},        {"version", 2}};
  std::string op_jwt, sys_jwt, app_jwt, user_jwt, rogue_jwt;
  if (!sign_jwt(
          dir, op,
          {{"iss", op.public_nkey()},
           {"sub", op.public_nkey()},
           {"name", "libshm-test-operator"},
           {"nats", {{"type", "operator"}, {"version", 2}, {"system_account", sys.public_nkey()}}}},
          op_jwt, log) ||
      !sign_jwt(dir, op,
                {{"iss", op.public_nkey()},
                 {"sub", sys.public_nkey()},
                 {"name", "SYS"},
                 {"nats", {{"limits", unlimited}, {"type", "account"}, {"version", 2}}}},
                sys_jwt, log) ||
      !sign_jwt(dir, op,
                {{"iss", op.public_nkey()},
                 {"sub", app.public_nkey()},
                 {"name", "app"},
                 {"nats", {{"limits", with_jetstream}, {"type", "account"}, {"version", 2}}}},
                app_jwt, log) ||
      !sign_jwt(dir, app,
                {{"iss", app.public_nkey()},
                 {"sub", user.public_nkey()},
                 {"name", "bridge"},
                 {"nats", user_nats}},
                user_jwt, log) ||
      !sign_jwt(dir, rogue_app,
                {{"iss", rogue_app.public_nkey()},
                 {"sub", rogue.public_nkey()},
                 {"name", "rogue"},
                 {"nats", user_nats}},
                rogue_jwt, log))
    return false;
  const std::string op_file = dir + "/operator.jwt";
  std::ofstream(op_file) << op_jwt;
  out.server_config = dir + "/server.conf";
  std::ofstream(out.server_config) << fmt::format(
      "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n"
      "  {}: \"{}\"\n  {}: \"{}\"\n}}\n",
      op_file, sys.public_nkey(), sys.public_nkey(), sys_jwt, app.public_nkey(), app_jwt);
  out.user_creds = dir + "/user.creds";
  std::ofstream(out.user_creds) << creds_file(user_jwt, user);
  out.rogue_creds = dir + "/rogue.creds";
  std::ofstream(out.rogue_creds) << creds_file(rogue_jwt, rogue);
  out.user_seed = user.seed_nkey();
  return true;
}

}  // namespace shm::test
