#include "daemon/engine/rules/anchors.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

namespace pairwall::engine::rules {

const Anchor* find_anchor(const RuleFile& file, std::string_view path) {
  for (const Anchor& a : file.anchors) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

Anchor* find_anchor(RuleFile& file, std::string_view path) {
  return const_cast<Anchor*>(find_anchor(std::as_const(file), path));
}

bool set_anchor_rules(RuleFile& file, std::string path, RuleFile content) {
  auto& anchors = file.anchors;
  Anchor* target = find_anchor(file, path);
  if (target == nullptr) return false;
  const std::size_t index = static_cast<std::size_t>(target - anchors.data());
  const std::string prefix = path + "/";
  const auto position = static_cast<std::ptrdiff_t>(target->position);

  // Its rules, those of the anchors within it too, stand together from its position.
  auto& rules = file.filter_rules;
  auto end = rules.begin() + position;
  while (end != rules.end() && (end->anchor == path || end->anchor.starts_with(prefix))) ++end;
  const std::size_t removed = static_cast<std::size_t>(end - (rules.begin() + position));
  rules.erase(rules.begin() + position, end);
  for (FilterRule& r : content.filter_rules) r.anchor = r.anchor.empty() ? path : prefix + r.anchor;
  const std::size_t added = content.filter_rules.size();
  rules.insert(rules.begin() + position, std::make_move_iterator(content.filter_rules.begin()),
               std::make_move_iterator(content.filter_rules.end()));

  // The anchors within it were declared right after it, as the new ones are placed.
  const auto first_within = anchors.begin() + static_cast<std::ptrdiff_t>(index) + 1;
  const auto end_within =
      std::find_if(first_within, anchors.end(), [&](const Anchor& a) { return !a.path.starts_with(prefix); });
  anchors.erase(first_within, end_within);
  for (Anchor& a : content.anchors) {
    a.path = prefix + a.path;
    a.parent = a.parent.empty() ? path : prefix + a.parent;
    a.position += static_cast<uint32_t>(position);
  }
  const std::size_t placed = content.anchors.size();
  anchors.insert(anchors.begin() + static_cast<std::ptrdiff_t>(index) + 1,
                 std::make_move_iterator(content.anchors.begin()),
                 std::make_move_iterator(content.anchors.end()));
  // Anchors declared after it stand after its rules.
  for (std::size_t i = index + 1 + placed; i < anchors.size(); ++i) {
    anchors[i].position = static_cast<uint32_t>(anchors[i].position - removed + added);
  }
  return true;
}

std::size_t anchor_rule_count(const RuleFile& file, std::string_view path) {
  return static_cast<std::size_t>(std::count_if(file.filter_rules.begin(), file.filter_rules.end(),
                                                [&](const FilterRule& r) { return r.anchor == path; }));
}

namespace {

// Visits the rules and anchors that stand directly in each rule set (the main one, then each
// anchor's), in file order: an anchor standing at a rule's index was written before that rule.
class Scopes {
 public:
  explicit Scopes(const RuleFile& file) {
    for (std::size_t a = 0; a < file.anchors.size(); ++a) children_[file.anchors[a].parent].push_back(a);
    for (uint32_t r = 0; r < file.filter_rules.size(); ++r) rules_[file.filter_rules[r].anchor].push_back(r);
  }

  // on_rule(index in filter_rules), on_anchor(index in anchors), in the order they stand in `scope`.
  template <typename OnRule, typename OnAnchor>
  void walk(const RuleFile& file, const std::string& scope, OnRule&& on_rule, OnAnchor&& on_anchor) const {
    static const std::vector<uint32_t> kNoRules;
    static const std::vector<std::size_t> kNoAnchors;
    const auto r_it = rules_.find(scope);
    const auto c_it = children_.find(scope);
    const std::vector<uint32_t>& rules = r_it == rules_.end() ? kNoRules : r_it->second;
    const std::vector<std::size_t>& children = c_it == children_.end() ? kNoAnchors : c_it->second;
    std::size_t r = 0;
    std::size_t c = 0;
    while (r < rules.size() || c < children.size()) {
      if (c < children.size() && (r == rules.size() || file.anchors[children[c]].position <= rules[r])) {
        on_anchor(children[c++]);
      } else {
        on_rule(rules[r++]);
      }
    }
  }

 private:
  std::map<std::string, std::vector<uint32_t>> rules_;
  std::map<std::string, std::vector<std::size_t>> children_;
};

}  // namespace

RuleNumbers rule_numbers(const RuleFile& file) {
  RuleNumbers out;
  out.rules.assign(file.filter_rules.size(), 0);
  out.anchors.assign(file.anchors.size(), 0);
  const Scopes scopes(file);
  auto number = [&](const std::string& scope) {
    uint32_t next = 0;
    scopes.walk(
        file, scope, [&](uint32_t rule) { out.rules[rule] = next++; },
        [&](std::size_t anchor) { out.anchors[anchor] = next++; });
  };
  number("");
  for (const Anchor& a : file.anchors) number(a.path);
  return out;
}

namespace {

// pf's evaluation of one rule set (the main one or an anchor's) as two lists: the rules that are
// final when they match, in the order they are met, and the others, in file order (the last of
// which to match wins).
struct DecisionOrder {
  std::vector<uint32_t> final;
  std::vector<uint32_t> last_match;
};

class Ranker {
 public:
  explicit Ranker(const RuleFile& file) : file_(file), scopes_(file) {}

  DecisionOrder order(const std::string& scope) const {
    DecisionOrder out;
    scopes_.walk(
        file_, scope,
        [&](uint32_t rule) { (file_.filter_rules[rule].quick ? out.final : out.last_match).push_back(rule); },
        [&](std::size_t index) {
          const Anchor& anchor = file_.anchors[index];
          DecisionOrder inner = order(anchor.path);
          append(out.final, inner.final);
          if (anchor.quick) {
            std::reverse(inner.last_match.begin(), inner.last_match.end());
            append(out.final, inner.last_match);
          } else {
            append(out.last_match, inner.last_match);
          }
        });
    return out;
  }

 private:
  static void append(std::vector<uint32_t>& to, const std::vector<uint32_t>& from) {
    to.insert(to.end(), from.begin(), from.end());
  }

  const RuleFile& file_;
  const Scopes scopes_;
};

}  // namespace

std::vector<uint32_t> decision_ranks(const RuleFile& file) {
  DecisionOrder order = Ranker(file).order("");
  // Every rule stands in the main rule set or a declared anchor (set_anchor_rules() keeps it so).
  std::vector<uint32_t> ranks(file.filter_rules.size(), 0);
  uint32_t next = 0;
  for (const uint32_t rule : order.final) ranks[rule] = next++;
  for (auto it = order.last_match.rbegin(); it != order.last_match.rend(); ++it) ranks[*it] = next++;
  return ranks;
}

}  // namespace pairwall::engine::rules
