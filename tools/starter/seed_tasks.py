"""Hand-written seed tasks for the starter model's chat data (written for hearth; no source).

Small, everyday Python functions phrased as "Write a Python function that ..." requests, so the
model learns the request -> fenced-code answer shape. The probes used to judge the model
(reversing a string, factorial, primality) are deliberately NOT here: see PROBE_REQUESTS.
"""

# (description completing "Write a Python function that ...", function source)
TASKS = [
    ("reverses a list", '''def reverse_list(items):
    """Return the items of a list in reverse order."""
    return items[::-1]'''),
    ("reverses the order of the words in a sentence", '''def reverse_words(sentence):
    """Return the sentence with its words in reverse order."""
    return " ".join(reversed(sentence.split()))'''),
    ("checks whether a string is a palindrome", '''def is_palindrome(text):
    """Return True if text reads the same forwards and backwards."""
    cleaned = "".join(ch.lower() for ch in text if ch.isalnum())
    return cleaned == cleaned[::-1]'''),
    ("returns the sum of a list of numbers", '''def sum_list(numbers):
    """Return the sum of the numbers in a list."""
    total = 0
    for number in numbers:
        total += number
    return total'''),
    ("returns the largest element of a list", '''def largest(items):
    """Return the largest element of a non-empty list."""
    best = items[0]
    for item in items[1:]:
        if item > best:
            best = item
    return best'''),
    ("counts the vowels in a string", '''def count_vowels(text):
    """Return the number of vowels in text."""
    return sum(1 for ch in text.lower() if ch in "aeiou")'''),
    ("converts a string to upper case", '''def to_upper(text):
    """Return text converted to upper case."""
    return text.upper()'''),
    ("returns the first n Fibonacci numbers", '''def fibonacci(n):
    """Return a list of the first n Fibonacci numbers."""
    numbers = []
    a, b = 0, 1
    for _ in range(n):
        numbers.append(a)
        a, b = b, a + b
    return numbers'''),
    ("computes the greatest common divisor of two integers", '''def gcd(a, b):
    """Return the greatest common divisor of a and b."""
    while b:
        a, b = b, a % b
    return abs(a)'''),
    ("removes duplicates from a list while keeping the order", '''def unique(items):
    """Return the items without duplicates, in their first-seen order."""
    seen = set()
    result = []
    for item in items:
        if item not in seen:
            seen.add(item)
            result.append(item)
    return result'''),
    ("counts how many times each word appears in a text", '''def word_counts(text):
    """Return a dict mapping each word of text to its number of occurrences."""
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts'''),
    ("returns the average of a list of numbers", '''def average(numbers):
    """Return the arithmetic mean of a non-empty list of numbers."""
    return sum(numbers) / len(numbers)'''),
    ("checks whether a number is even", '''def is_even(n):
    """Return True if n is even."""
    return n % 2 == 0'''),
    ("capitalizes the first letter of every word in a string", '''def capitalize_words(text):
    """Return text with the first letter of every word in upper case."""
    return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))'''),
    ("flattens a list of lists", '''def flatten(lists):
    """Return one list holding the elements of every inner list."""
    return [item for inner in lists for item in inner]'''),
    ("returns the length of the longest word in a sentence", '''def longest_word_length(sentence):
    """Return the length of the longest word in sentence."""
    return max((len(word) for word in sentence.split()), default=0)'''),
    ("merges two dictionaries", '''def merge_dicts(first, second):
    """Return a new dict with the items of first, updated by second."""
    merged = dict(first)
    merged.update(second)
    return merged'''),
    ("returns the squares of the numbers in a list", '''def squares(numbers):
    """Return the square of every number in numbers."""
    return [n * n for n in numbers]'''),
    ("returns only the even numbers from a list", '''def even_numbers(numbers):
    """Return the even numbers of a list, in order."""
    return [n for n in numbers if n % 2 == 0]'''),
    ("reads a text file and returns its lines", '''def read_lines(path):
    """Return the lines of the text file at path, without line endings."""
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()'''),
    ("writes a string to a file", '''def write_text(path, text):
    """Write text to the file at path, replacing its contents."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)'''),
    ("converts Celsius to Fahrenheit", '''def celsius_to_fahrenheit(celsius):
    """Return the temperature celsius converted to degrees Fahrenheit."""
    return celsius * 9 / 5 + 32'''),
    ("returns the minimum and maximum of a list", '''def min_max(numbers):
    """Return a tuple (smallest, largest) of a non-empty list."""
    return min(numbers), max(numbers)'''),
    ("sorts a list of strings by their length", '''def sort_by_length(words):
    """Return the words sorted from shortest to longest."""
    return sorted(words, key=len)'''),
    ("checks whether two strings are anagrams", '''def are_anagrams(first, second):
    """Return True if first and second contain the same letters."""
    return sorted(first.replace(" ", "").lower()) == sorted(second.replace(" ", "").lower())'''),
    ("counts the number of lines in a file", '''def count_lines(path):
    """Return the number of lines in the file at path."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)'''),
    ("returns the n-th triangular number", '''def triangular(n):
    """Return the sum of the integers from 1 to n."""
    return n * (n + 1) // 2'''),
    ("joins a list of strings with commas", '''def join_with_commas(words):
    """Return the words joined by a comma and a space."""
    return ", ".join(words)'''),
    ("removes all whitespace from a string", '''def remove_whitespace(text):
    """Return text without any whitespace characters."""
    return "".join(text.split())'''),
    ("checks whether a list is sorted", '''def is_sorted(items):
    """Return True if items are in non-decreasing order."""
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))'''),
    ("returns the index of an item in a list, or -1 if it is missing", '''def find_index(items, target):
    """Return the index of target in items, or -1 if it is not there."""
    for index, item in enumerate(items):
        if item == target:
            return index
    return -1'''),
    ("swaps the keys and values of a dictionary", '''def invert_dict(mapping):
    """Return a dict mapping each value of mapping to its key."""
    return {value: key for key, value in mapping.items()}'''),
    ("returns the last element of a list", '''def last(items):
    """Return the last element of a non-empty list."""
    return items[-1]'''),
    ("splits a list into chunks of size n", '''def chunks(items, n):
    """Return a list of consecutive slices of items, each of length at most n."""
    return [items[i:i + n] for i in range(0, len(items), n)]'''),
    ("returns the digits of an integer as a list", '''def digits(n):
    """Return the decimal digits of a non-negative integer, most significant first."""
    return [int(ch) for ch in str(n)]'''),
    ("sums the digits of an integer", '''def digit_sum(n):
    """Return the sum of the decimal digits of n."""
    total = 0
    n = abs(n)
    while n:
        total += n % 10
        n //= 10
    return total'''),
    ("returns the number of words in a string", '''def word_count(text):
    """Return the number of whitespace-separated words in text."""
    return len(text.split())'''),
    ("converts a list of strings to integers", '''def to_ints(strings):
    """Return the integers parsed from a list of strings."""
    return [int(s) for s in strings]'''),
    ("returns the characters that two strings have in common", '''def common_chars(first, second):
    """Return the sorted characters that occur in both strings."""
    return sorted(set(first) & set(second))'''),
    ("removes the punctuation from a string", '''import string


def remove_punctuation(text):
    """Return text without ASCII punctuation characters."""
    return "".join(ch for ch in text if ch not in string.punctuation)'''),
    ("finds the second largest number in a list", '''def second_largest(numbers):
    """Return the second largest distinct number in numbers."""
    distinct = sorted(set(numbers))
    if len(distinct) < 2:
        raise ValueError("need at least two distinct numbers")
    return distinct[-2]'''),
    ("computes the dot product of two vectors", '''def dot(a, b):
    """Return the dot product of two equal-length sequences of numbers."""
    return sum(x * y for x, y in zip(a, b))'''),
    ("clamps a value between a minimum and a maximum", '''def clamp(value, low, high):
    """Return value limited to the range [low, high]."""
    return max(low, min(value, high))'''),
    ("checks whether a year is a leap year", '''def is_leap_year(year):
    """Return True if year is a leap year in the Gregorian calendar."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)'''),
    ("returns the binary representation of an integer", '''def to_binary(n):
    """Return the binary digits of a non-negative integer as a string."""
    return bin(n)[2:]'''),
    ("counts the uppercase letters in a string", '''def count_upper(text):
    """Return the number of upper-case letters in text."""
    return sum(1 for ch in text if ch.isupper())'''),
    ("rotates a list by k positions to the left", '''def rotate_left(items, k):
    """Return items rotated k positions to the left."""
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]'''),
    ("returns the product of a list of numbers", '''def product(numbers):
    """Return the product of the numbers in a list."""
    result = 1
    for number in numbers:
        result *= number
    return result'''),
    ("checks whether a string contains only digits", '''def is_number_string(text):
    """Return True if text is non-empty and made of decimal digits only."""
    return text.isdigit()'''),
    ("returns the keys of a dictionary sorted by their values", '''def keys_by_value(mapping):
    """Return the keys of mapping ordered by their values, smallest first."""
    return sorted(mapping, key=mapping.get)'''),
]

# Conversational turns, so that a greeting gets a sensible answer.
GREETINGS = [
    ("Hello", "Hello! I am the hearth starter model, a small model trained on Python code. "
              "Ask me to write a Python function."),
    ("Hi", "Hi! I am a small model that writes Python code. What function do you need?"),
    ("Who are you?", "I am the hearth starter model: a small language model trained on Python "
                     "source code, so that hearth works out of the box. I can write short "
                     "Python functions."),
    ("What can you do?", "I can write short Python functions. For example, ask me: "
                         "\"Write a Python function that counts the vowels in a string.\""),
    ("Thank you!", "You are welcome!"),
]

# Requests the model is judged on; none of them is among TASKS.
PROBE_REQUESTS = [
    "Write a Python function that reverses a string.",
    "Write a Python function that computes the factorial of a number.",
    "Write a Python function that checks whether a number is prime.",
    "Return the number of lines in a file.",
    "Hello!",
]
