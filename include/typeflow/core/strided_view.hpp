// strided_view<T>: a tensor's values where its rows sit at a padded stride.
//
// Parameters of rank 2 and more are stored with padded rows (see
// padded_row_length in contract/layer.hpp); this view shows them as the flat,
// row-major tensor of their shape, so element i is what a weights file or
// PyTorch calls element i.
#pragma once

#include <cstddef>
#include <iterator>

namespace typeflow {

template <class T>
class strided_view {
 public:
  strided_view() = default;
  strided_view(T* data, std::size_t size, std::size_t row_length, std::size_t row_stride)
      : data_(data), size_(size), row_length_(row_length ? row_length : 1), row_stride_(row_stride ? row_stride : 1) {}

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t row_length() const noexcept { return row_length_; }
  std::size_t row_stride() const noexcept { return row_stride_; }
  // The first stored element; rows follow every row_stride() elements.
  T* storage() const noexcept { return data_; }

  T& operator[](std::size_t i) const noexcept { return data_[i / row_length_ * row_stride_ + i % row_length_]; }

  class iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = std::remove_cv_t<T>;
    using difference_type = std::ptrdiff_t;
    using pointer = T*;
    using reference = T&;

    iterator() = default;
    iterator(const strided_view& view, std::size_t index) : view_(view), index_(index) {}
    reference operator*() const { return view_[index_]; }
    reference operator[](difference_type n) const { return view_[index_ + n]; }
    iterator& operator++() { return ++index_, *this; }
    iterator operator++(int) { auto old = *this; ++index_; return old; }
    iterator& operator--() { return --index_, *this; }
    iterator operator--(int) { auto old = *this; --index_; return old; }
    iterator& operator+=(difference_type n) { return index_ += n, *this; }
    iterator& operator-=(difference_type n) { return index_ -= n, *this; }
    friend iterator operator+(iterator it, difference_type n) { return it += n; }
    friend iterator operator+(difference_type n, iterator it) { return it += n; }
    friend iterator operator-(iterator it, difference_type n) { return it -= n; }
    friend difference_type operator-(const iterator& a, const iterator& b) {
      return static_cast<difference_type>(a.index_) - static_cast<difference_type>(b.index_);
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.index_ == b.index_; }
    friend auto operator<=>(const iterator& a, const iterator& b) { return a.index_ <=> b.index_; }

   private:
    strided_view view_;  // a copy: iterators outlive temporary views
    std::size_t index_ = 0;
  };

  iterator begin() const { return {*this, 0}; }
  iterator end() const { return {*this, size_}; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0, row_length_ = 1, row_stride_ = 1;
};

}  // namespace typeflow
