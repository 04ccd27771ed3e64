// shmctl inspect NAME: the generic header (identity, creator, counters, every
// attacher with its liveness, and pid + command line of live holders), then
// the kind's own description under "kind_state".
#include "output.hpp"
#include "segment_access.hpp"

#include "node_render.hpp"

namespace shm::shmctl {
namespace {

// Realtime timestamps in the header description, shown again as ISO 8601.
std::string_view readable_twin(std::string_view key) noexcept {
  if (key == "created_ns") return "created_at";
  if (key == "attach_time_ns") return "attached_at";
  return {};
}

// Copies an object node, adding a readable twin after each realtime timestamp.
void copy_with_readable_times(const Node& from, Node& to) {
  for (const auto& [key, child] : from.members()) {
    switch (child.type()) {
      case Node::Type::Value:
        to.set(key, child.value(), child.metric());
        if (const auto twin = readable_twin(key); !twin.empty()) {
          if (const auto* ns = std::get_if<std::uint64_t>(&child.value()))
            to.set(std::string(twin), iso_time(*ns));
        }
        break;
      case Node::Type::Object:
        copy_with_readable_times(child, to.object(key));
        break;
      case Node::Type::Array: {
        Node& array = to.array(key);
        for (const Node& element : child.elements()) {
          if (element.type() == Node::Type::Value)
            array.push(element.value());
          else if (element.type() == Node::Type::Object)
            copy_with_readable_times(element, array.push_object());
        }
        break;
      }
    }
  }
}

}  // namespace

Exit run_inspect(const Context& ctx, const std::string& name) {
  auto opened = open_segment(ctx, name, Access::Inspect);
  if (!opened) return report_error(ctx, "inspect", opened.error());

  Node header;
  describe_header(opened->segment, header);
  Node doc;
  copy_with_readable_times(header, doc);
  doc.set("valid", !opened->layout_error);
  if (opened->layout_error) {
    Node& error = doc.object("error");
    error.set("code", std::string(to_string(opened->layout_error->code)));
    error.set("message", opened->layout_error->message);
    if (opened->older_layout != nullptr)
      opened->older_layout->describe(opened->segment, doc.object("kind_state"));
  } else if (opened->kind == nullptr) {
    doc.set("note", "kind id " + std::to_string(opened->kind_id()) +
                        " is unknown to this build (known kinds: " + known_kinds() +
                        "); only the generic header is shown");
  } else {
    opened->kind->describe(opened->segment, doc.object("kind_state"));
  }

  if (ctx.json)
    print_json(ctx, tools::to_json(doc));
  else
    ctx.out << tools::to_text(doc);

  if (opened->layout_error) {
    warn(ctx, "inspect", *opened->layout_error);
    return Exit::Invalid;
  }
  return Exit::Ok;
}

}  // namespace shm::shmctl
