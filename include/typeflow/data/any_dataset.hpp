// any_dataset<Element>: any dataset of a given element type, behind one type.
//
// fit's options name their validation data without knowing the pipeline's
// full type; opening a pass allocates the cursor once, outside the steps.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "typeflow/data/example.hpp"

namespace typeflow::data {

template <class Element>
class any_dataset {
  struct cursor_base {
    virtual ~cursor_base() = default;
    virtual bool next(Element& out) = 0;
  };
  struct source_base {
    virtual ~source_base() = default;
    virtual std::int64_t cardinality() const = 0;
    virtual std::unique_ptr<cursor_base> open(std::uint64_t epoch) const = 0;
  };
  template <class D>
  struct source final : source_base {
    D dataset;
    explicit source(D d) : dataset(std::move(d)) {}
    std::int64_t cardinality() const override { return dataset.cardinality(); }
    std::unique_ptr<cursor_base> open(std::uint64_t epoch) const override {
      using inner = decltype(dataset.open(epoch));
      struct holder final : cursor_base {
        inner cursor;
        explicit holder(inner c) : cursor(std::move(c)) {}
        bool next(Element& out) override { return cursor.next(out); }
      };
      return std::make_unique<holder>(dataset.open(epoch));
    }
  };

 public:
  using element_type = Element;

  class cursor {
   public:
    explicit cursor(std::unique_ptr<cursor_base> c) : impl_(std::move(c)) {}
    bool next(Element& out) { return impl_->next(out); }

   private:
    std::unique_ptr<cursor_base> impl_;
  };

  any_dataset() = default;
  template <dataset D>
    requires std::same_as<typename D::element_type, Element> && (!std::same_as<D, any_dataset>)
  any_dataset(D d) : source_(std::make_shared<source<D>>(std::move(d))) {}

  explicit operator bool() const { return source_ != nullptr; }
  std::int64_t cardinality() const { return source_->cardinality(); }
  cursor open(std::uint64_t epoch) const { return cursor(source_->open(epoch)); }

 private:
  std::shared_ptr<const source_base> source_;
};

}  // namespace typeflow::data
