// What a compare run's numbers depend on besides its configuration (issue 26 item 0): the data it
// trained and was scored on, and the binary and machine that computed them. Every run records both
// (provenance.json when it starts, and in result.json); a grid resumed on other data is refused
// before anything trains, naming the runs and the difference, and runs of one variant made on
// different machines are reported (not refused: same data, other rounding).
#pragma once
#include <string>

#include "core/json.h"
#include "model/config.h"

namespace attnlab {

// The identity of a run's data: for the train and validation shards and the tokenizer, the bytes
// and the CRC-32 of the file's contents (zlib), so a re-prepared directory with other contents
// differs even when prepare.json looks alike, and an identical re-preparation does not.
nlohmann::json data_identity(const Config& cfg);
// "" when `now` is the data `stored` records, else the differences ("val.bin: 2688 bytes crc
// 0x…, now 736 bytes crc 0x…"). A record without "data" (made before it was recorded) gives "".
std::string data_differences(const nlohmann::json& stored, const nlohmann::json& now);
// The binary and the machine: attnlab's version and the numeric environment (CPU, ISA, oneDNN,
// threads; train/environment.h).
nlohmann::json machine_record();
// The part of a machine record that changes rounding (CPU model, ISA, oneDNN, threads), as text.
std::string machine_key(const nlohmann::json& machine);

}  // namespace attnlab
